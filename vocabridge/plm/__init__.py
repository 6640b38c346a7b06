"""Pretrained language models in translation: small BERTs of the pipeline's own (bert) and AB-Net (abnet)."""
