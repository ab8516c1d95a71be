"""``python3 -m hpcjobs.runtime.supervisor``: the supervisor from an installed hpcjobs."""

import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
