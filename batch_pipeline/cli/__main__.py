"""`python -m batch_pipeline.cli`: the same as the `batch-pipeline` command."""

import sys

from batch_pipeline.cli import main

sys.exit(main())
