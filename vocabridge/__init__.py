"""vocabridge: vocabulary adaptation for domain adaptation of NMT."""
