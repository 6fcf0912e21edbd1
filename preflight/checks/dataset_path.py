"""Checks layer: whether the dataset path a check was given is there, and whose fault it is when it is not.

One rule for every check that reads the dataset (storage, dataloader; issue 35): a configuration's mistake must
never take a node out of rotation, and a node's fault must never pass for the configuration's.

- ``path`` does not exist (ENOENT), a component of it is a file (ENOTDIR), or a check that reads a directory is
  given a file: the config's mistake (``errors.ConfigMistake``: the run exits 2, the line names the option's
  ``FILE:LINE:COL`` and the fix), on whatever node it runs;
- except where ``path`` lies under a mount point that /etc/fstab lists and that is not mounted now: the node's
  mounts are not up (at boot, a failed NFS mount), so it is the node's fault (exit 1), said as such. A
  Kubernetes volume the pod spec does not mount is the spec's mistake: nothing in the node's fstab names it;
- any other error (EIO, ESTALE, ETIMEDOUT, EACCES: a disk, a mount or a server that fails, permissions on the
  volume) is the node's: the check reports its metrics unmeasurable with the reason (exit 1).

``stat`` runs in the check's worker, under its timeout: a mount that never answers holds the worker, never the
runner (``runner``'s stuck-process handling names it).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import Any

from preflight.errors import ConfigMistake
from preflight.host.fsinfo import Filesystem, filesystem_of, mount_root, unmounted
from preflight.measurement import Measurement

SCAN_ALL = 1 << 40  # the walk's cap for ``scan: all``: none but its time (``Budget.walk_s``)
MOUNTED_HINT = ("mount the dataset's volume at {path} on this node (an NFS or FUSE mount that did not come up, a "
                "Kubernetes volume missing from the pod), or point {path} at where it is mounted")


# The kubelet's folder for a pod's volume, where the volume's plugin mounts its filesystem; a container's bind mount
# of it with nothing mounted there shows the kubelet's own folder on the node's disk (kubernetes-csi/csi-driver-nfs#762,
# cubefs/cubefs#3684): its path is then the mount's root, which a mounted volume's never is.
KUBELET_VOLUME = re.compile(r"/pods/[^/]+/volumes/kubernetes\.io~(?P<plugin>[^/]+)/(?P<name>[^/]+)(?:/mount)?(?:/.*)?$")
ON_NODE_DISK = ("empty-dir", "configmap", "secret", "projected", "downward-api", "git-repo")  # no mount of their own


def mounted(path: str) -> Measurement:
    """``mounted`` (1 or 0): ``path`` exists and lies on a filesystem mounted for it, not on the root filesystem (the
    node's, or a container's overlay), where a dataset mount that did not come up leaves an empty folder or none;
    read from /proc/self/mountinfo (the mount point holding its real path, and the folder of its filesystem mounted
    there: a bind mount of a folder of the root filesystem, or of the kubelet's folder for a pod's volume on which
    nothing was mounted, is no mount of the dataset's)."""
    method = f"/proc/self/mountinfo: the mount holding {path}"
    try:
        fs = filesystem_of(path)
    except OSError as error:
        return Measurement("mounted", 0.0, "", method=method, reason=f"{path} does not exist on this node "
                           f"({error.strerror}): {_what_is_mounted(path)}", hint=MOUNTED_HINT.format(path=path))
    why = _not_its_mount(path, fs)
    return Measurement("mounted", 0.0 if why else 1.0, "", method=f"{method}: {fs.describe()}",
                       hint=MOUNTED_HINT.format(path=path), reason=why)


def _not_its_mount(path: str, fs: Filesystem) -> str:
    """Why ``path`` (on ``fs``) is on no filesystem mounted for the dataset; "" when it is."""
    if fs.mount_point == "/":
        return f"{path} lies on the root filesystem ({fs.fstype} at /), not on a volume mounted for the dataset"
    root, device = mount_root(os.path.realpath(path))
    kubelet = KUBELET_VOLUME.search(root)
    if kubelet and kubelet["plugin"] not in ON_NODE_DISK:
        return (f"{path} is the kubelet's own folder for the pod's volume {kubelet['name']} "
                f"(kubernetes.io~{kubelet['plugin']}: {root} on {fs.fstype} {fs.source}), bind-mounted at "
                f"{fs.mount_point} with nothing mounted on it: the volume's mount (its CSI driver's, NFS's) is absent "
                f"on this node, and the job would read and write the node's disk")
    if root != "/" and device and device == mount_root("/")[1]:
        return (f"{path} lies on the root filesystem ({fs.fstype} {fs.source}, device {device}): {fs.mount_point} is "
                f"its folder {root} mounted again there (a bind mount, or a subvolume), not a volume mounted for the "
                f"dataset")
    return ""


def _mounted_above(path: str) -> Filesystem | None:
    """The filesystem holding the nearest folder above ``path`` that exists, when it is not the root filesystem."""
    above = os.path.abspath(path)
    while not os.path.isdir(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    try:
        fs = filesystem_of(above)
    except OSError:
        return None
    return None if fs.mount_point == "/" else fs


def _what_is_mounted(path: str) -> str:
    """What a missing ``path`` says of the mounts: none there, or one above it that does not hold it."""
    fs = _mounted_above(path)
    if fs is None:
        return "no filesystem is mounted there"
    return (f"{fs.describe()} is mounted above it and does not hold it (another export, bucket or subPath, or a "
            f"bucket mounted without its folders, as gcsfuse lists them without --implicit-dirs)")


def max_files(options: Any) -> int:
    """The files a walk of ``path`` takes: ``max_files``, or for ``scan: all`` every one it finds in its time."""
    return SCAN_ALL if options.get("scan") == "all" else int(options["max_files"])


def reason(path: str, instance: str, directory: bool, mount_required: bool = False) -> str:
    """Why ``path`` (``{instance}.path``) cannot be read, when that is the node's fault; "" when it is there.

    ``directory``: the check reads a directory (the dataloader); a file is then the config's mistake too.
    ``mount_required``: a ``mounted`` threshold is declared, so a missing path is the node's missing mount.

    Raises:
        ConfigMistake: on option ``path``: it does not exist, or is not a directory where one is read (without
            ``mount_required``).
    """
    try:
        mode = os.stat(path).st_mode  # links followed, as the job's open() follows them
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ENOTDIR):
            return (f"{path} cannot be reached ({errno.errorcode.get(error.errno or 0, '?')}: {error.strerror}): "
                    f"the node's volume or mount fails; see `dmesg` and the mount's server")
        mount_point = unmounted(path)
        if mount_point:
            return (f"{path} does not exist: it lies under {mount_point}, which /etc/fstab mounts but is not mounted "
                    f"on this node: mount it (mount {mount_point}), then run again")
        if mount_required:  # the config says the dataset is a mount of its own: its absence is the node's
            above = _mounted_above(path)
            mount = ("the dataset's mount did not come up" if above is None else
                     f"{above.fstype} at {above.mount_point} is mounted but does not hold it")
            return (f"{path} does not exist on this node: {mount} ({instance}.mounted is required): mount it, then "
                    f"run again")
        raise ConfigMistake(f"{instance}.path: {path} does not exist on this node: set {instance}.path (or DATA_DIR "
                            f"with the bundled thresholds.yaml) to the dataset's directory, or mount the dataset "
                            f"there", "path") from None
    if directory and not stat.S_ISDIR(mode):
        raise ConfigMistake(f"{instance}.path: {path} is not a directory: point {instance}.path at the dataset's "
                            f"directory", "path")
    return ""
