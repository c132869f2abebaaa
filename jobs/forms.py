"""The Training Job creation form; its rules live in jobs.validation (shared with the API)."""

from __future__ import annotations

from django import forms

from .choices import FRAMEWORK_VERSIONS, Framework, LearningType
from .models import ServerType, TrainingJob
from .validation import allocation_for, tags_error, validate_job

VERSION_CHOICES = [
    (version, f"{Framework(fw).label} {version}") for fw, versions in FRAMEWORK_VERSIONS.items() for version in versions
]


class TrainingJobForm(forms.Form):
    # Required information
    learning_type = forms.ChoiceField(choices=LearningType.choices, widget=forms.RadioSelect, initial=LearningType.ON_DEMAND)
    name = forms.CharField(max_length=63, help_text="3–63 lowercase letters, digits, '-' and '.'; starts and ends with a letter or digit.")
    framework = forms.ChoiceField(choices=Framework.choices, initial=Framework.PYTORCH, label="Distributed framework")
    framework_version = forms.ChoiceField(choices=VERSION_CHOICES, label="Framework version")
    # Service information
    failover_enabled = forms.BooleanField(required=False, label="Use Job Failover")
    server_type = forms.ModelChoiceField(queryset=ServerType.objects.all(), to_field_name="name", empty_label=None, widget=forms.RadioSelect)
    gpus_per_node = forms.TypedChoiceField(coerce=int, choices=[], label="Resource allocation")
    node_count = forms.IntegerField(min_value=1, max_value=64, initial=1, label="Number of nodes")
    shm_size_gb = forms.IntegerField(min_value=1, initial=64, label="Shared memory (GB)")
    # AI Training Image
    image_url = forms.CharField(max_length=255, label="AI Training Image URL")
    registry_username = forms.CharField(max_length=128, required=False, label="User ID")
    registry_password = forms.CharField(max_length=256, required=False, label="Password", widget=forms.PasswordInput(render_value=False))
    # Training command and volume
    use_storage = forms.BooleanField(required=False, label="Use storage connection")
    volume_mount_path = forms.CharField(max_length=255, required=False, label="File Storage volume mount path")
    script_url = forms.CharField(max_length=1024, required=False, label="Training script URL (Object Storage)")
    command = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 4}))

    def __init__(self, *args, owner=None, tags=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.owner = owner
        self.tags = tags or []
        self.tag_error: str | None = None
        self.server_types = list(ServerType.objects.all())
        self.fields["gpus_per_node"].choices = sorted(
            {(a.gpus, f"{a.gpus} GPU") for st in self.server_types for a in st.allocations()}
        )
        if self.server_types and not self.is_bound:
            self.initial.setdefault("server_type", self.server_types[0].name)

    def clean(self):
        data = super().clean()
        if error := tags_error(self.tags):
            self.tag_error = error
            self.add_error(None, error)
        if self.errors:
            return data
        server_type = data["server_type"]
        allocation = allocation_for(server_type.info(), data["gpus_per_node"])
        if allocation is not None:
            data["memory_gb"] = allocation.memory_gb
        if data.get("use_storage"):
            if not data.get("volume_mount_path"):
                self.add_error("volume_mount_path", "Enter the mount path of the File Storage volume.")
        else:
            data["volume_mount_path"] = data["script_url"] = ""
        plain = {**data, "server_type": server_type.name, "tags": self.tags}
        for field, message in validate_job(plain, {st.name: st.info() for st in self.server_types}).items():
            if field == "tags":
                continue  # checked above, even when other fields failed
            self.add_error(field if field in self.fields else None, message)
        if data.get("name") and self.owner and TrainingJob.objects.filter(owner=self.owner, name=data["name"]).exists():
            self.add_error("name", "You already have a Training Job with this name.")
        return data

    def job_fields(self) -> dict:
        data = self.cleaned_data
        keys = [
            "name", "learning_type", "framework", "framework_version", "failover_enabled", "server_type",
            "gpus_per_node", "memory_gb", "node_count", "shm_size_gb", "image_url", "registry_username",
            "volume_mount_path", "script_url", "command",
        ]
        return {key: data[key] for key in keys}


def tags_from_post(post) -> list[dict[str, str]]:
    """Tag rows of a form post: blank rows are dropped, keys and values stripped."""
    keys, values = post.getlist("tag_key"), post.getlist("tag_value")
    return [
        {"key": key.strip(), "value": value.strip()}
        for key, value in zip(keys, values, strict=False)
        if key.strip() or value.strip()
    ]
