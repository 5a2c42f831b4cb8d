"""No user-typed field can add a scheduler directive or run a command on the login node.

Hypothesis throws newlines, directive prefixes, `$(...)`, backticks, quotes and `;` at every field a person
can type. Each spec is either refused with InvalidJobSpec, or renders a script whose directive lines are
exactly the ones the backend generated and whose shell parts keep every value inert (checked by running them
in a real bash).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.aws_batch import AWSBatchBackend
from backends.base import InvalidJobSpec, JobSpec, Launcher, Resources
from backends.local import LocalBackend
from backends.safety import directive_lines, validate_spec
from backends.script import staged_command
from backends.slurm import SlurmBackend

# Every scheduler's, and the lines AWS Batch's preview shows its job definition in (guarded the same way).
ALL_PREFIXES = ("#SBATCH", "#PBS", "#$", "#BSUB", "#AWSBATCH")
NASTY = [
    "\n", "\r", "#SBATCH --gres=gpu:8", "\n#SBATCH --account=other", "\n#PBS -l select=99", "\n#$ -l f_node=99",
    "$(touch PWNED)", "`touch PWNED`", "'", '"', ";", "; touch PWNED", "&& touch PWNED", "|", "${IFS}", "\\", "*",
    "--", "-x", " ", "\t", "\x00", "..", "../..", "~root", "$HOME", "%j", "\u202e",
]
text = st.one_of(
    st.text(max_size=30),
    st.lists(st.sampled_from(NASTY) | st.text(alphabet="abcXYZ019_.-/", max_size=5), max_size=6).map("".join),
)


SAFE = {
    "name": ["train", "sweep-1.a", "Z_9"],
    "env_key": ["NCCL_DEBUG", "LR", "_x"],
    "module": ["cuda/12.4", "python/3.11", "openmpi/4.1.6-gcc"],
    "workdir": ["jobs/x", "kakehashi-jobs/kh-1", "/scratch/a/b"],
    "container": ["", "docker://nvcr.io/nvidia/pytorch:24.05-py3", "/shared/torch.sif"],
    "group": ["kkdemo", "gaa50000", ""],
}


RENDERED = {"count": 0}
# The last test reads what the property test counted: both run in one process (one xdist worker), in this order.
pytestmark = pytest.mark.xdist_group("tests/backends/test_injection.py")


class _BatchRenderer(AWSBatchBackend):
    """AWS Batch runs container images on an instance type: the typed spec is checked as it is (modules
    included), then rendered without its modules and on a p4d."""

    def __init__(self) -> None:
        super().__init__(None, {"bucket": "kakehashi-jobs", "cluster": "aws", "default_image": "python:3.12"})

    def _cloud(self, spec: JobSpec) -> JobSpec:
        validate_spec(spec)
        return replace(spec, modules=(), resources=replace(spec.resources, mapping={"instance_type": "p4d.24xlarge"}))

    def render(self, spec: JobSpec) -> str:
        return super().render(self._cloud(spec))

    def directives(self, spec: JobSpec) -> list[str]:
        return super().directives(self._cloud(spec))


# Every backend and dialect, built for rendering only (no transport needed to render).
def _pbs(dialect: str):
    def make():
        from backends.pbs import PBSBackend

        return PBSBackend(None, {"dialect": dialect})

    return make


def _sge(profile: str):
    def make():
        from backends.sge import SGEBackend

        return SGEBackend(None, {"site_profile": profile})

    return make


RENDERERS = {
    "local": lambda: LocalBackend(None),
    "slurm": lambda: SlurmBackend(None, {}),
    "pbspro": _pbs("pbspro"),
    "torque": _pbs("torque"),
    "sge-tsubame": _sge("tsubame"),
    "sge-abci": _sge("abci"),
    "sge": _sge("generic"),
    "aws-batch": _BatchRenderer,
}


def _spec(name, payload, env_key, env_value, module, workdir, container, group) -> JobSpec:
    return JobSpec(
        name=name,
        payload=payload,
        walltime_seconds=600,
        resources=Resources(nodes=2, gpus_per_node=8, gpu_type="a100", cpus_per_node=16, mapping={"partition": "gpu"}),
        workdir=workdir,
        group=group,
        modules=(module,),
        container=container,
        env={env_key: env_value},
        launcher=Launcher.TORCHRUN,
    )


def _exports_are_inert(script: str, env: dict[str, str]) -> None:
    """Run the script's export lines in bash: values arrive verbatim and nothing else happens."""
    # The variables Kakehashi sets itself are left out by name: a value may well contain "KAKEHASHI".
    exports = [line for line in script.split("\n")
               if line.startswith("export ") and not line.startswith(("export KAKEHASHI_", "export MASTER_"))]
    with tempfile.TemporaryDirectory() as tmp:
        probe = "\n".join(exports) + "\n" + "".join(f'printf "%s\\0" "${key}"\n' for key in env)
        result = subprocess.run(["/bin/bash", "-c", probe], cwd=tmp, capture_output=True, env={"PATH": os.environ["PATH"]})
        assert result.returncode == 0, result.stderr
        assert result.stdout.split(b"\0")[:-1] == [value.encode() for value in env.values()]
        assert os.listdir(tmp) == [], "a value ran a command"


@pytest.mark.parametrize("kind", sorted(RENDERERS))
@settings(max_examples=int(os.environ.get("KAKEHASHI_HYPOTHESIS_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), payload=text, env_value=text)
def test_no_typed_field_adds_a_directive_or_runs_a_command(kind, data, payload, env_value):
    # Free-text fields (payload, env values) are always arbitrary; of the checked fields one at a time is too,
    # so that specs which pass validation are common and exercised.
    fields = {name: data.draw(st.sampled_from(safe), label=name) for name, safe in SAFE.items()}
    corrupt = data.draw(st.sampled_from([None, *SAFE]), label="corrupt")
    if corrupt:
        fields[corrupt] = data.draw(text, label=f"{corrupt} (any text)")
    name, env_key, module, workdir, container, group = (fields[k] for k in SAFE)
    backend = RENDERERS[kind]()
    spec = _spec(name, payload or "echo hi", env_key or "X", env_value, module or "cuda/12.4", workdir or "jobs/x",
                 container, group)
    try:
        script = backend.render(spec)
    except InvalidJobSpec:
        return
    RENDERED["count"] += 1
    found = [line for prefix in ALL_PREFIXES for line in directive_lines(script, prefix)]
    assert sorted(found) == sorted(line for line in backend.directives(spec) if line.startswith(ALL_PREFIXES))
    _exports_are_inert(script, spec.env)
    # The submit command keeps the job directory one shell word.
    command = staged_command(spec.workdir, "true")
    assert shlex.split(command)[3] == spec.workdir


@pytest.mark.parametrize("kind", sorted(RENDERERS))
def test_directives_inside_the_payload_stay_inert_in_their_own_file(kind):
    import io
    import tarfile

    from backends.script import staging_archive

    payload = "#SBATCH --gres=gpu:a100:99\n#PBS -l select=99\n#$ -l f_node=99\necho hi\n"
    spec = _spec("ok", payload, "X", "1", "cuda/12.4", "jobs/x", "", "kkdemo")
    script = RENDERERS[kind]().render(spec)
    assert "99" not in "".join(line for prefix in ALL_PREFIXES for line in directive_lines(script, prefix))
    with tarfile.open(fileobj=io.BytesIO(staging_archive(spec, script))) as tar:
        assert tar.extractfile("payload.sh").read().decode() == payload
        assert tar.extractfile("job.sh").read().decode() == script


def test_the_property_above_rendered_many_specs_not_only_refusals():
    # Guards the property test against passing vacuously (pytest runs this file top to bottom).
    assert RENDERED["count"] >= 100


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "ok\n#SBATCH --gres=gpu:8"),
        ("name", "$(reboot)"),
        ("name", "a;b"),
        ("module", "cuda/12.4\n#SBATCH -A other"),
        ("module", "cuda/12.4; rm -rf ~"),
        ("workdir", "../other-user"),
        ("workdir", "jobs/$(id)"),
        ("env_key", "A;B"),
        ("env_key", "_"),
        ("env_key", "UID"),
        ("env_key", "SLURM_NTASKS"),
        ("env_key", "BASH_FUNC_x%%"),
        ("env_value", "x\n#SBATCH --account=other"),
        ("group", "kkdemo\n#SBATCH --qos=high"),
        ("container", "docker://img;reboot"),
    ],
)
@pytest.mark.parametrize("kind", sorted(RENDERERS))
def test_known_attacks_are_refused_with_a_message(kind, field, value):
    fields = {"name": "ok", "payload": "echo hi", "env_key": "X", "env_value": "1", "module": "cuda/12.4",
              "workdir": "jobs/x", "container": "", "group": "kkdemo", field: value}
    with pytest.raises(InvalidJobSpec) as refused:
        RENDERERS[kind]().render(_spec(**fields))
    assert str(refused.value)
