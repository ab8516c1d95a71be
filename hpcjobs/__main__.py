"""``python -m hpcjobs`` runs the command-line interface."""

from hpcjobs.cli import main

if __name__ == "__main__":
    main()
