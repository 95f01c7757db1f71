#!/bin/bash
# A one-node SLURM cluster on this machine (Debian's slurm-wlm and munge; run as root), for
# tests/pack/test_cluster_slurm_real.py and for trying pack_array.sbatch (carla-wds slurm-script)
# without a cluster:  apt-get install slurm-wlm munge && tools/slurm/local_cluster.sh start
#           tools/slurm/local_cluster.sh stop
# Writes /etc/slurm/slurm.conf for a node named after this host with its CPUs and 8 GB.
set -euo pipefail
case "${1:-}" in
start)
    node=$(hostname -s)
    cpus=$(nproc)
    mkdir -p /run/munge /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    chown munge:munge /run/munge
    cat > /etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=$node
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MpiDefault=none
ReturnToService=2
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$node CPUs=$cpus RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
    pgrep -x munged > /dev/null || runuser -u munge -- /usr/sbin/munged
    pgrep -x slurmctld > /dev/null || /usr/sbin/slurmctld
    pgrep -x slurmd > /dev/null || /usr/sbin/slurmd
    for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -q idle && exit 0; sleep 1; done
    echo "slurm did not come up: see /var/log/slurm/" >&2
    exit 1
    ;;
stop)
    for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
        [ -f "$pidfile" ] && kill "$(cat "$pidfile")" || true
    done
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
