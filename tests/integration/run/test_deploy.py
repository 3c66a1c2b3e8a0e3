"""Issue 27: the deployment recipes stay runnable as the CLI changes.

``docs/deploy/rayjob.yaml`` (a KubeRay ``RayJob``) must parse, and its entrypoint -- like every
``ray job submit … -- python -m nlq2sql.cli …`` command in ``docs/scaling.md`` -- must be a
command line the CLI accepts (parsed by the command itself, options and values checked); the
job's runtime environment must ship every dependency ``pyproject.toml`` declares.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from typing import Any

import typer
import yaml

from nlq2sql.cli.main import app
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.batch_out import SCHEMES

RAYJOB = PROJECT_ROOT / "docs" / "deploy" / "rayjob.yaml"


def parse_command(line: str) -> tuple[str, dict[str, Any]]:
    """``python -m nlq2sql.cli CMD ARGS…`` parsed by the CLI's own command (unknown options and
    bad values raise), without running it."""
    words = shlex.split(line)
    assert words[:3] == ["python", "-m", "nlq2sql.cli"], words[:3]
    group = typer.main.get_command(app)
    name, args = words[3], words[4:]
    command = group.commands[name]  # type: ignore[attr-defined]
    with command.make_context(name, args) as ctx:
        return name, dict(ctx.params)


def test_the_rayjob_manifest_parses_and_runs_a_resumable_batch_to_a_bucket() -> None:
    job = yaml.safe_load(RAYJOB.read_text())
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    name, params = parse_command(spec["entrypoint"])
    assert name == "batch" and params["resume"] is True and params["force"] is False
    assert params["ray_address"] == "auto"
    scheme = params["out"].split("://", 1)[0]
    assert scheme == "s3" and scheme in SCHEMES and "@" not in params["out"] and "?" not in params["out"]
    env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert env["working_dir"].endswith(".zip")
    deps = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(deps) <= set(env["pip"]), f"missing from the job's pip: {sorted(set(deps) - set(env['pip']))}"
    assert not [k for k in env["env_vars"] if re.search(r"KEY|SECRET|TOKEN|PASSWORD", k)]  # no credentials
    cluster = spec["rayClusterSpec"]
    images = [c["image"] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
              for c in g["template"]["spec"]["containers"]]
    assert images and all(i.endswith(f":{cluster['rayVersion']}-py311") for i in images)
    assert spec["backoffLimit"] >= 1  # a retried job resumes


def submitted_commands() -> list[str]:
    """Every ``ray job submit … -- python -m nlq2sql.cli …`` in docs/scaling.md, lines joined."""
    text = (PROJECT_ROOT / "docs" / "scaling.md").read_text()
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "ray job submit" in b]
    joined = [re.sub(r"\\\n\s*", " ", b) for b in blocks]
    return [m.group(1) for b in joined for m in re.finditer(r" -- (python -m nlq2sql\.cli [^\n]*)", b)]


def test_the_ray_job_submit_recipes_are_valid_command_lines() -> None:
    commands = submitted_commands()
    assert len(commands) >= 2, commands  # eval and batch
    parsed = [parse_command(c) for c in commands]
    assert {name for name, _ in parsed} >= {"eval", "batch"}
    batch = next(p for name, p in parsed if name == "batch")
    assert batch["resume"] is True and batch["out"].startswith("s3://")
