"""How a multi-host launch reaches its hosts, as pure functions: hosts, the ssh argv, the quoted remote
command, each node's torchrun argv (the one builder), and the check of a host's Python against the kernel's."""

import shlex
from pathlib import Path

import pytest

import tpu_lab as tl
from tpu_lab.errors import EnvironmentProblem, InvalidArgument
from tpu_lab.tp.launch.hosts import resolve_hosts
from tpu_lab.tp.launch.runners import ssh_wire as wire
from tpu_lab.tp.launch.runners.ssh_command import (
    client_argv,
    forwarded_env,
    host_python,
    remote_argv,
)
from tpu_lab.tp.launch.torchrun_command import LaunchSpec, build_command


def test_hosts_explicit_or_from_the_tpu_worker_list():
    assert resolve_hosts(["10.0.0.2", "root@10.0.0.3", "t1v-n-0"], {}) == ("10.0.0.2", "root@10.0.0.3", "t1v-n-0")
    env = {"TPU_WORKER_HOSTNAMES": "10.0.0.2, 10.0.0.3"}
    assert resolve_hosts("TPU_WORKER_HOSTNAMES", env) == ("10.0.0.2", "10.0.0.3")
    with pytest.raises(EnvironmentProblem, match="TPU_WORKER_HOSTNAMES is not set") as e:
        resolve_hosts("TPU_WORKER_HOSTNAMES", {})
    assert "hosts=[" in e.value.fix


@pytest.mark.parametrize(
    ("hosts", "match"),
    [
        ([], "non-empty list"),
        ("10.0.0.2,10.0.0.3", "non-empty list"),
        (["-oProxyCommand=touch /tmp/x"], "not a host name"),
        (["a b"], "not a host name"),
        (["h;rm -rf /"], "not a host name"),
        ([3], "not a host name"),
        (["10.0.0.2", "10.0.0.2"], "names one host twice"),
        (["10.0.0.2", "root@10.0.0.2"], "names one host twice"),  # issue 20 item 6: two names, one host
        (["Host-A", "host-a"], "names one host twice"),
        (["10.0.0.2\n"], "not a host name"),  # a trailing newline
        (["10.0.0.2\n; touch /tmp/x"], "not a host name"),
    ],
)
def test_bad_hosts(hosts, match):
    with pytest.raises(InvalidArgument, match=match) as e:
        resolve_hosts(hosts, {})
    assert e.value.fix


def test_ssh_argv_is_batch_mode_and_quotes_the_remote_command():
    remote = tl.Remote(ssh_options=("-p", "2222"))
    command = remote_argv("/opt/my env/bin/python", {"PYTHONPATH": "/src/$HOME;x"}, "TPU_LAB_RUN_ID=r-node1-")
    argv = client_argv(remote, "10.0.0.3", 1, command)
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"] and "-T" in argv
    assert argv[-4:-2] == ["-p", "2222"] and argv[-2] == "10.0.0.3"
    # one argument, which a POSIX shell splits back into exactly the argv: nothing is expanded
    assert shlex.split(argv[-1]) == command
    assert command == [
        "env",
        "PYTHONPATH=/src/$HOME;x",
        "TPU_LAB_RUN_ID=r-node1-",
        "/opt/my env/bin/python",
        "-m",
        "tpu_lab.tp.launch.runners.ssh_host",
    ]


def test_a_command_prefix_such_as_gcloud():
    prefix = ("gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-tpu", "--worker={worker}", "--command={command}")
    argv = client_argv(tl.Remote(prefix=prefix), "10.0.0.3", 1, ["python", "-c", "print('a b')"])
    assert argv == [*prefix[:6], "--worker=1", "--command=python -c 'print('\"'\"'a b'\"'\"')'"]
    wrapped = client_argv(tl.Remote(prefix=("my-ssh", "--via", "bastion")), "h1", 0, ["true"])
    assert wrapped == ["my-ssh", "--via", "bastion", "h1", "true"]  # no ssh options forced on another tool


def test_remote_checks_and_per_host_python():
    with pytest.raises(InvalidArgument, match="tuple of strings"):
        tl.launch("print(1)", nproc=1, hosts=["h"], remote=tl.Remote(ssh_options="-p 22"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"not a tl\.Remote"):
        tl.launch("print(1)", nproc=1, hosts=["h"], remote={"port": 22})
    with pytest.raises(InvalidArgument, match="only applies to a launch with hosts"):
        tl.launch("print(1)", nproc=1, remote=tl.Remote())
    remote = tl.Remote(python={"h2": "/usr/bin/python3"})
    assert host_python(remote, "h2") == "/usr/bin/python3" and host_python(remote, "h1", "/k/python") == "/k/python"
    assert forwarded_env({"PYTHONPATH": "/a", "HOME": "/root", "HF_HOME": ""}) == {"PYTHONPATH": "/a"}


# Flag shapes torchrun itself uses (issue 20 item 1): every one must reach the script untouched.
USER_ARGS = [
    ["--master-weights=fp32", "--rdzv-timeout=5", "--standalone", "--lr=0.1"],
    ["--master-weights", "fp32"],
    ["--nnodes=3", "--node-rank", "2", "--nproc-per-node=8"],
    ["--rdzv-endpoint", "10.9.9.9:1", "--rdzv_backend=c10d", "--log-line-prefix-template=x"],
    ["-m", "tpu_lab.tp.launch.rank_worker", "--", "--tee=3", "--redirects", "1"],
    ["", " ", "a b", "$HOME", "'q'", "é\u00a0"],
]


@pytest.mark.parametrize("args", USER_ARGS)
@pytest.mark.parametrize("nnodes", [1, 3])
def test_one_builder_for_any_node_count_passes_user_arguments_untouched(args, nnodes):
    node = nnodes - 1
    spec = LaunchSpec(
        script=Path("/r/w.py"), nproc=2, run_dir=Path("/r"), run_id="x-node2-", port=29511, args=tuple(args),
        nnodes=nnodes, node_rank=node, master="10.0.0.2" if nnodes > 1 else "127.0.0.1", rdzv_id="x",
    )  # fmt: skip
    argv, env = build_command(spec, {})
    at = argv.index("tpu_lab.tp.launch.rank_worker")
    assert argv[at + 1 :] == ["/r/w.py", *args]  # byte for byte, whatever they look like
    own = argv[:at]
    assert f"--nnodes={nnodes}" in own and f"--rdzv-conf=rank={node}" in own and "--rdzv-id=x" in own
    assert own.count("--nnodes=" + str(nnodes)) == 1 and not any(a.startswith("--log-line-prefix") for a in own)
    assert ("GLOO_SOCKET_IFNAME" in env) == (nnodes == 1)  # loopback master: gloo on loopback too


def test_wire_framing():
    assert wire.parse(wire.control("hello", port=5)) == ("control", {"kind": "hello", "port": 5})
    assert wire.parse(wire.output_line(3, "a\tb")) == ("line", (3, "a\tb"))
    assert wire.parse(wire.output_line(None, "torchrun")) == ("line", (None, "torchrun"))
    assert wire.parse("ssh: connect to host x port 22: Connection refused")[0] == "raw"


def test_a_host_with_another_python_is_named():
    ours = {"python": "3.11.7", "tpu_lab": "0.1.0", "torch": "2.14.1", "transformers": "5.24.0"}
    assert wire.facts_problem("h", "/p", dict(ours, python="3.11.2"), ours) is None
    problem = wire.facts_problem("h2", "/p", dict(ours, python="3.10.1", torch="2.12.0"), ours)
    assert "Host h2" in problem and "Python 3.10.1 (here 3.11.7)" in problem and "torch 2.12.0 (here 2.14.1)" in problem
    assert "has no torch" in wire.facts_problem("h3", "/p", dict(ours, torch=None), ours)
