"""`python -m batch_pipeline.bench`: the embedding throughput benchmark (see `embedding`)."""

import sys

from batch_pipeline.bench.embedding import main

sys.exit(main())
