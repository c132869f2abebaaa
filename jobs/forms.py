"""The Training Job creation form; its rules are jobs.submission's check, which the API calls too.

Fields only convert types here (no required/min/max of their own): every rule, a blank
value included, is answered by jobs.submission (with jobs.validation's plain rules) so the
page and the API say the same thing.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import QueryDict

from console.lib.fields import form_integer
from console.lib.validation import INTEGER_MESSAGE
from workspaces.admission import workspace_for

from .choices import Framework, LearningType
from .environments import offered
from .models import ServerType, TrainingEnvironment
from .submission import check_new_job
from .validation import (
    FRAMEWORK_MESSAGE,
    LEARNING_TYPE_MESSAGE,
    MAX_NODES,
    SERVER_TYPE_MESSAGE,
    parse_inputs_text,
)

# marked with a red star on the page; jobs.validation is what enforces them (the image is
# optional: the training environment's is filled in, and process nodes need none)
REQUIRED_FIELDS = frozenset({
    "learning_type", "name", "framework", "framework_version", "server_type", "gpus_per_node",
    "node_count", "shm_size_gb", "command",
})


def _integer(label: str, **attrs: int) -> forms.IntegerField:
    return form_integer(label, forms.NumberInput(attrs=attrs))  # min/max: the browser's hints only


STORAGE_CONNECTION_MESSAGE = "Enter a File Storage volume mount path, a training script URL, or both."

class TrainingJobForm(forms.Form):
    # Required information
    learning_type = forms.ChoiceField(
        choices=LearningType.choices, widget=forms.RadioSelect, initial=LearningType.ON_DEMAND, required=False,
        error_messages={"invalid_choice": LEARNING_TYPE_MESSAGE},
    )
    name = forms.CharField(required=False, help_text="3–63 lowercase letters, digits, '-' and '.'; starts and ends with a letter or digit.")
    framework = forms.ChoiceField(
        choices=Framework.choices, initial=Framework.PYTORCH, label="Distributed framework", required=False,
        error_messages={"invalid_choice": FRAMEWORK_MESSAGE},
    )
    framework_version = forms.CharField(
        required=False, label="Framework version", widget=forms.Select,
        help_text="Each version is a training environment: the packages it holds are listed with it.",
    )
    # Service information
    failover_enabled = forms.BooleanField(
        required=False, label="Use Job Failover",
        help_text="Job Failover reallocates the job to healthy nodes after a hardware fault. Spot Training cannot be used with Job Failover.",
    )
    spot_fallback_after_minutes = _integer("Spot fallback after (minutes)", min=0)
    spot_fallback_after_minutes.help_text = (
        "Spot Training only: interrupted and not resumed within this many minutes, the job resumes on on-demand "
        "capacity, billed at the on-demand price from then on. Blank: wait for spot capacity however long it takes.")
    server_type = forms.ModelChoiceField(
        queryset=ServerType.objects.all(), to_field_name="name", empty_label=None, widget=forms.RadioSelect,
        required=False, error_messages={"invalid_choice": SERVER_TYPE_MESSAGE},
    )
    gpus_per_node = forms.IntegerField(
        required=False, label="Resource allocation", error_messages={"invalid": INTEGER_MESSAGE}, widget=forms.Select,
    )
    node_count = _integer("Number of nodes", min=1, max=MAX_NODES)
    shm_size_gb = _integer("Shared memory (GB)", min=1)
    # AI Training Image
    image_url = forms.CharField(required=False, label="AI Training Image URL")
    registry_username = forms.CharField(required=False, label="User ID")
    registry_password = forms.CharField(required=False, label="Password", widget=forms.PasswordInput(render_value=False))
    # Training command and volume
    use_storage = forms.BooleanField(
        required=False, label="Use storage connection",
        help_text="Mount a File Storage volume and read the training script from Object Storage.",
    )
    volume_mount_path = forms.CharField(required=False, label="File Storage volume mount path")
    script_url = forms.CharField(required=False, label="Training script URL (Object Storage)")
    command = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}))
    # the user's project, data and the job to start from (issue 33: what `simpleai run` sets)
    workdir_url = forms.CharField(
        required=False, label="Workdir URL (Object Storage)",
        help_text="A project packed by simpleai run --workdir: s3://<your bucket>/workdirs/<sha256>.tar.gz. "
        "The command runs in it.",
    )
    inputs = forms.CharField(
        required=False, label="Inputs", widget=forms.Textarea(attrs={"rows": 3, "placeholder": "DATA=s3://…/datasets/shakespeare/"}),
        help_text="One NAME=s3://… per line, from your own storage: synced onto each node before the command "
        "starts, at $SIMPLEAI_INPUT_<NAME>. A URL ending in / is a folder.",
    )
    # a select of the owner's jobs with a checkpoint; any other id gets jobs.submission's answer, as in the API
    from_checkpoint = forms.IntegerField(
        required=False, label="Start from the checkpoint of", widget=forms.Select,
        help_text="One of your jobs with a checkpoint: this job starts from its newest one, as after a failover.",
        error_messages={"invalid": INTEGER_MESSAGE},
    )
    # Training Workspace and warm pool (rules: workspaces.admission)
    workspace = forms.CharField(required=False, label="Training Workspace", widget=forms.Select)
    keep_alive_minutes = _integer("Keep nodes warm (minutes)", min=0)
    time_limit_minutes = _integer("Time limit (minutes, Slurm clusters only)", min=1)

    def __init__(self, *args: Any, owner: Any = None, tags: list[dict[str, str]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner = owner
        self.tags = tags or []
        self.tag_error: str | None = None
        self.server_types = list(ServerType.objects.all())
        self.framework_versions = offered.offered_versions()
        self.fields["framework_version"].widget.choices = offered.version_choices()
        self.environments = offered.describe(TrainingEnvironment.objects.filter(enabled=True))
        self.fields["gpus_per_node"].widget.choices = sorted(
            {(a.gpus, f"{a.gpus} GPU") for st in self.server_types for a in st.allocations()}
        )
        for name in REQUIRED_FIELDS:
            self.fields[name].show_required = True
        names = list(owner.training_workspaces.values_list("name", flat=True)) if owner else []
        self.fields["workspace"].widget.choices = [("", "None (shared pool)"), *((name, name) for name in names)]
        with_checkpoint = (owner.training_jobs.filter(checkpoint_step__isnull=False).values_list("pk", "name", "checkpoint_step")
                           if owner else [])
        self.fields["from_checkpoint"].widget.choices = [
            ("", "None (start from scratch)"),
            *((pk, f"{name} (job {pk}, step {step})") for pk, name, step in with_checkpoint),
        ]
        if not self.is_bound:
            self.initial.setdefault("node_count", 1)
            self.initial.setdefault("shm_size_gb", 64)
            self.initial.setdefault("keep_alive_minutes", 10)
            self.initial.setdefault("framework_version", offered.default_version(Framework.PYTORCH, self.framework_versions))
            if self.server_types:
                self.initial.setdefault("server_type", self.server_types[0].name)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("use_storage"):
            # either is a storage connection: a first job reads its script from object storage
            # and needs no File Storage volume (which a node without a sandbox cannot mount)
            if not data.get("volume_mount_path") and not data.get("script_url"):
                self.add_error("volume_mount_path", STORAGE_CONNECTION_MESSAGE)
        else:
            data["volume_mount_path"] = data["script_url"] = ""
        server_type = data.get("server_type")
        inputs, inputs_error = parse_inputs_text(data.get("inputs") or "")
        plain = {**data, "server_type": server_type.name if server_type else "", "tags": self.tags, "inputs": inputs}
        server_types = {st.name: st.info() for st in self.server_types}
        errors = check_new_job(self.owner, plain, server_types, self.framework_versions)
        data["framework_version"], data["memory_gb"] = plain.get("framework_version", ""), plain["memory_gb"]
        data["image_url"], data["inputs"] = plain.get("image_url", ""), plain["inputs"]
        if inputs_error:
            errors["inputs"] = inputs_error
        if "tags" in errors:
            # shown in the tags area; a non-field error keeps the form invalid
            self.tag_error = errors.pop("tags")
            self.add_error(None, self.tag_error)
        for field, message in errors.items():
            if field not in self._errors:  # a value that failed its type check has its message already
                self.add_error(field if field in self.fields else None, message)
        return data

    def job_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        keys = [
            "name", "learning_type", "framework", "framework_version", "failover_enabled", "server_type",
            "gpus_per_node", "memory_gb", "node_count", "shm_size_gb", "image_url", "registry_username",
            "volume_mount_path", "script_url", "command", "keep_alive_minutes", "workdir_url", "inputs",
            "from_checkpoint", "spot_fallback_after_minutes", "time_limit_minutes",
        ]
        fields = {key: data[key] for key in keys}
        if fields["keep_alive_minutes"] is None:
            del fields["keep_alive_minutes"]  # the model's default
        return {**fields, "workspace": workspace_for(self.owner, data.get("workspace"))}


def tags_from_post(post: QueryDict) -> list[dict[str, str]]:
    """Tag rows of a form post: blank rows are dropped, keys and values stripped."""
    keys, values = post.getlist("tag_key"), post.getlist("tag_value")
    return [
        {"key": key.strip(), "value": value.strip()}
        for key, value in zip(keys, values, strict=False)
        if key.strip() or value.strip()
    ]
