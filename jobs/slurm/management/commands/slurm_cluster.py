"""Register and check Slurm clusters from the command line (the admin does the same).

    manage.py slurm_cluster add hpc --server-type g3 --rest-url http://slurm-head:6820 --user simpleai \\
        --jwt-key-file /etc/slurm/jwt_hs256.key --on-demand-partition gpu --spot-partition gpu-spot \\
        --gpus-per-node 8 --console-url http://console:8000 --jobcomp-path /var/log/slurm/jobcomp.txt
    manage.py slurm_cluster check hpc
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.models import ServerType
from jobs.slurm.models import SlurmCluster, check_cluster


class Command(BaseCommand):
    help = "Register (add) or check a Slurm cluster"

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="register a cluster (its fields as in the admin)")
        add.add_argument("name")
        add.add_argument("--server-type", required=True)
        add.add_argument("--rest-url", required=True)
        add.add_argument("--api-version", default="v0.0.38")
        add.add_argument("--user", required=True, help="the service user")
        secret = add.add_mutually_exclusive_group(required=True)
        secret.add_argument("--jwt-key-file", type=Path, help="the cluster's jwt_hs256.key (read as bytes)")
        secret.add_argument("--token", help="a token from scontrol token (expires)")
        add.add_argument("--on-demand-partition", required=True)
        add.add_argument("--spot-partition", required=True)
        add.add_argument("--gpus-per-node", type=int, required=True)
        add.add_argument("--console-url", required=True)
        add.add_argument("--jobcomp-path", required=True)
        add.add_argument("--launcher")
        add.add_argument("--work-dir")
        add.add_argument("--gpu-type", default="")
        add.add_argument("--accounting", action="store_true", help="slurmdbd and slurmrestd's slurmdb endpoints are there")
        check = sub.add_parser("check", help="ping slurmrestd and look for the partitions")
        check.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "add":
            self._add(options)
        cluster = SlurmCluster.objects.filter(name=options["name"]).first()
        if cluster is None:
            raise CommandError(f"no Slurm cluster {options['name']!r}")
        ok, message = check_cluster(cluster)
        if not ok:
            raise CommandError(f"{cluster.name}: {message}")
        self.stdout.write(f"{cluster.name}: {message}")

    def _add(self, options: dict[str, Any]) -> None:
        server_type = ServerType.objects.filter(name=options["server_type"]).first()
        if server_type is None:
            raise CommandError(f"no server type {options['server_type']!r}")
        fields = {
            "name": options["name"], "server_type": server_type, "rest_url": options["rest_url"],
            "api_version": options["api_version"], "user_name": options["user"],
            "on_demand_partition": options["on_demand_partition"], "spot_partition": options["spot_partition"],
            "gpus_per_node": options["gpus_per_node"], "console_url": options["console_url"],
            "jobcomp_path": options["jobcomp_path"], "gpu_type": options["gpu_type"], "accounting": options["accounting"],
        }
        fields.update({key: options[key] for key in ("launcher", "work_dir") if options[key]})
        cluster = SlurmCluster(**fields)
        if options["jwt_key_file"]:
            try:
                cluster.set_jwt_key(options["jwt_key_file"].read_bytes())
            except OSError as exc:
                raise CommandError(f"cannot read the JWT key: {exc}") from exc
        else:
            cluster.set_token(options["token"])
        try:
            cluster.full_clean()
        except ValidationError as exc:
            raise CommandError("; ".join(f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items())) from exc
        cluster.save()
        self.stdout.write(f"registered Slurm cluster {cluster.name} for server type {server_type.name}")
