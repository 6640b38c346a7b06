"""Translation models in the OPUS-MT / Hugging Face Marian format: build, train, translate."""
