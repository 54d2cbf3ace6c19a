"""Print the configured partition keys, one per line (used by `make demo`)."""

from batch_pipeline.config import load_config

if __name__ == "__main__":
    print("\n".join(load_config().partition_keys()))
