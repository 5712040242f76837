"""Which processes this test session left behind. The machine may be shared (other sessions launch their
own runs), so a run counts as ours when it carries this session's marker (conftest sets it in os.environ
before any test, and every launch inherits it) or descends from this process."""

import os

from tpu_lab.host.processes import descendants, pids_with_env

SESSION_ENV = "TPU_LAB_TEST_SESSION"
# Test infrastructure that lives for the whole session on purpose (the loopback sshd): never a leftover.
INFRASTRUCTURE: set[int] = set()


def leftovers() -> list[int]:
    """Live processes of this test session other than this one."""
    marker = f"{SESSION_ENV}={os.environ[SESSION_ENV]}".encode()
    return sorted((set(pids_with_env(marker)) | set(descendants(os.getpid()))) - INFRASTRUCTURE)
