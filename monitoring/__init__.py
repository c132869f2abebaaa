"""Log streams and metric samples: ingestion, storage, live views."""
