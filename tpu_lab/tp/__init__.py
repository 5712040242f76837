"""Tensor parallel from a notebook: a preflight that predicts sharding failures, and a torchrun launcher."""
