"""Who holds a TCP port: the listening socket in /proc/net/tcp{,6}, and the process that has it open."""

from __future__ import annotations

import os
import pwd
import socket
from pathlib import Path

from preflight.host import ports


def test_a_listening_socket_names_this_process_and_its_command_line():
    with socket.socket(socket.AF_INET6) as holder:  # IPv6, dual stack: /proc/net/tcp6
        holder.bind(("::", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        assert ports.in_use(port) is not None  # the IPv4 wildcard it would listen on is taken too
        found = ports.holders(port)
        command = " ".join(Path(f"/proc/{os.getpid()}/cmdline").read_bytes().decode().split("\0")).strip()
        assert found == [ports.Holder(os.getuid(), os.getpid(), " ".join(command.split()))]
        assert ports.describe(found) == (f"pid {os.getpid()} (user {pwd.getpwuid(os.getuid()).pw_name}: "
                                         f"{' '.join(command.split())[:200]})")
    assert ports.holders(port) == [] and ports.in_use(port) is None


def test_a_holder_this_user_cannot_see_is_named_by_its_owner(tmp_path):
    # /proc/net/tcp as the kernel writes it: a socket of uid 1000 listening on 0.0.0.0:29500 (0x733C), whose
    # process is not under this /proc (another container of the pod, or another user's, unreadable).
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:733C 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 424242 1 "
        "0000000000000000 100 0 0 10 0\n"
        "   1: 0100007F:733C 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000  1000        0 515151 1 "
        "0000000000000000 20 4 30 10 -1\n")
    (tmp_path / "4242" / "fd").mkdir(parents=True)
    os.symlink("socket:[999]", tmp_path / "4242" / "fd" / "3")
    found = ports.holders(29500, proc=str(tmp_path))
    assert found == [ports.Holder(1000, None, "")]  # the established connection (state 01) is not a listener
    owner = pwd.getpwuid(1000).pw_name if 1000 in {p.pw_uid for p in pwd.getpwall()} else "1000"
    assert ports.describe(found) == (f"a process of user {owner} not visible from here (another user's, or another "
                                     f"container's in this pod)")
    assert ports.holders(29501, proc=str(tmp_path)) == []
