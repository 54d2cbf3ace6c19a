"""Model generations: the registry of states, the lifecycle (track, review, promote, drop),
the evaluation gate, the drift check, and undoing a run."""
