"""slurm.conf of the local test cluster (jobs.slurm.tests.cluster): one controller, its `slurmd -N`
nodes with GPUs as gres, on-demand and spot partitions, job completion records and, where the
cluster has it, slurmdbd accounting."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cluster import LocalSlurm


def slurm_conf(cluster: LocalSlurm) -> str:
    root = cluster.root
    node_lines = "\n".join(
        f"NodeName={name} NodeAddr=127.0.0.1 Port={port} CPUs={cluster.cpus_per_node} Sockets=1 "
        f"CoresPerSocket={cluster.cpus_per_node} ThreadsPerCore=1 RealMemory={cluster.memory_mb} "
        f"Gres=gpu:{cluster.gpu_type}:{cluster.gpus_per_node} Features={cluster.features} State=UNKNOWN"
        for name, port in cluster.node_ports.items()
    )
    nodes = ",".join(cluster.nodes)
    # accounting without enforcement: an account Slurm does not know falls back to the user's default
    accounting = (f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
                  f"AccountingStoragePort={cluster.dbd_port}\nAccountingStoragePass={root}/munge/munge.sock\n"
                  "AccountingStorageTRES=gres/gpu\n"
                  if cluster.accounting else "")
    return f"""# written by jobs.slurm.tests.cluster for one test session
ClusterName=simpleai
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={cluster.ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock,cred_expire={cluster.cred_expire}
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={root}/jwt.key
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
MpiDefault=none
SchedulerType=sched/backfill
# look at pending jobs every second (defaults: 60 s, backfill 30 s, new batch jobs 3 s): slurmctld
# starts no batch job at its submission, only in these passes (its background loop wakes once a
# second, so a new job waits 0.5 s on average); a requeued job starts again as soon as its
# requeue delay (cred_expire) has passed
SchedulerParameters=sched_interval=1,bf_interval=1,batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerNode=1024
GresTypes=gpu
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
JobCompType=jobcomp/filetxt
JobCompLoc={cluster.jobcomp}
{accounting}SlurmdTimeout={cluster.slurmd_timeout}
MessageTimeout=5
KillWait={cluster.kill_wait}
ReturnToService=2
MailProg=/bin/true
{node_lines}
PartitionName=ondemand Nodes={nodes} Default=YES PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
PartitionName=spot Nodes={nodes} PriorityTier=1 PreemptMode=REQUEUE GraceTime=0 MaxTime=INFINITE State=UP
"""
