"""Offload of closed ledgers to S3-compatible object storage."""
