"""What happens on the submit host: submitting, the submission records, the checkpoint folder's
owner, chains of runs and following them."""
