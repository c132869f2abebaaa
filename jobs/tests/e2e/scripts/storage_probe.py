"""What a job can do with the object-storage credentials it is given (tests of tenant storage).

Prints one line per probe: `PROBE <name> ok` or `PROBE <name> refused <code>`. Argument: another
job id of the same owner, and another tenant's bucket.
"""

import os
import sys

import boto3
from botocore.exceptions import ClientError

other_job, other_bucket = sys.argv[1], sys.argv[2]
bucket, job = os.environ["SIMPLEAI_BUCKET"], os.environ["CHECKPOINT_S3_URL"].split("/jobs/")[1].split("/")[0]
s3 = boto3.client("s3", region_name="us-east-1")  # the AWS_* variables: endpoint and the attempt's own keys
print("PROBE key", os.environ["AWS_ACCESS_KEY_ID"], flush=True)


def probe(name, call):
    try:
        call()
        print(f"PROBE {name} ok", flush=True)
    except ClientError as error:
        print(f"PROBE {name} refused {error.response['Error']['Code']}", flush=True)


probe("read-own-script", lambda: s3.get_object(Bucket=bucket, Key="uploads/storage_probe.py"))
probe("list-own-bucket", lambda: s3.list_objects_v2(Bucket=bucket))
probe("write-own-prefix", lambda: s3.put_object(Bucket=bucket, Key=f"jobs/{job}/probe.txt", Body=b"mine"))
probe("write-other-job", lambda: s3.put_object(Bucket=bucket, Key=f"jobs/{other_job}/checkpoints/step-1/MANIFEST.json", Body=b"{}"))
probe("overwrite-upload", lambda: s3.put_object(Bucket=bucket, Key="uploads/storage_probe.py", Body=b"planted"))
probe("read-other-tenant", lambda: s3.list_objects_v2(Bucket=other_bucket))
probe("write-other-tenant", lambda: s3.put_object(Bucket=other_bucket, Key="uploads/planted.py", Body=b"x"))
probe("create-bucket", lambda: s3.create_bucket(Bucket=f"{bucket}-more"))
print("PROBE buckets", ",".join(b["Name"] for b in s3.list_buckets()["Buckets"]), flush=True)

