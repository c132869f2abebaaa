"""simpleai: the command line and Python SDK of Simple AI Training.

Owns what a user's laptop needs to drive a console: its REST API with a personal token
(`simpleai.client`, typed methods over /api/v1/), the job file (`simpleai.jobfile`), following
a job's logs across console restarts (`simpleai.follow`), a text summary of its metrics
(`simpleai.summary`), a project directory packed and uploaded with its inputs to the user's
own storage and a job's results downloaded (`simpleai.packing`, `simpleai.storage`,
`simpleai.project`) and the `simpleai` command (`simpleai.cli`).

It may import the standard library, PyYAML and boto3 (only when storage is used): nothing of
Django or of the console's apps, so it runs where only this directory was copied.

    from simpleai.client import Client
    client = Client("https://console.example.com", "<token from /account/token/>")
    job = client.create_job({"name": "bert", "image_url": "...", "command": "python train.py", ...})
"""

__version__ = "0.1.0"
