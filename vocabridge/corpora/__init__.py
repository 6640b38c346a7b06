"""Corpus recipes: where parallel and monolingual text comes from, and how it is cleaned and split."""
