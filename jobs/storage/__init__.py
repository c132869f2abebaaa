"""Object storage per tenant: each user's storage space, each attempt's credentials, and the
checks of locations as their owner.

- iam: the SeaweedFS IAM client (identities, keys, policies) and the console's admin S3 client:
  the only code that uses the console's own keys.
- models / spaces: StorageSpace (a user's bucket and keys) and its actions (provision, rotate).
- credentials: an attempt's keys (minted when it is created, revoked when it ends, swept), the
  per-job checkpoint signing key, and the placement's `storage` and environment.
- checks: a script URL checked with the owner's keys; a location not the owner's is refused.
- objectstore: where a job's data lives in its owner's bucket (prefixes of outputs, checkpoints).
- legacy: the one-time move of pre-tenant data into the owners' buckets (storage_spaces command).

May import jobs.models, console.lib.crypto and console.lib.audit; the web layer (views, api) imports it,
never the other way round. Nothing here runs without S3_ENDPOINT_URL: no object storage, no
spaces, no credentials.
"""
