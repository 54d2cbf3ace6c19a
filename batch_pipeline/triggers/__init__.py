"""What starts a run: the publish sensor's change detection and the tags every run carries."""
