"""The worker's command line as bash reads it (hpcgpu.jobspec.scriptfields.shell_join): every
argument comes back as given, except that ``$NAME``/``${NAME}`` references in an otherwise
plain value of ``--name`` or ``--local-directory`` are expanded by the job's shell, as
dask-jobqueue's users expect."""

from __future__ import annotations

import re
import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.jobspec.scriptfields import shell_join

VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
ARGUMENT = st.one_of(st.sampled_from(["test-$MY_ENV_VARIABLE", "${MY_ENV_VARIABLE}x", "$MY_ENV_VARIABLEx", "a$(id)"]),
                     st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20))


def as_bash_reads(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(["bash", "-c", 'printf "%s\\0" ' + shell_join(argv)], capture_output=True,
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8", "surrogateescape").split("\x00")[:-1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["--name", "--local-directory", "--x"]), ARGUMENT),
                min_size=1, max_size=3))
def test_every_argument_comes_back_as_given_or_with_its_variables_expanded(pairs):
    argv = [item for pair in pairs for item in pair]
    env = {"MY_ENV_VARIABLE": "value"}
    got = as_bash_reads(argv, env)
    assert got[::2] == argv[::2]
    for (flag, value), read in zip(pairs, got[1::2], strict=True):
        expected = value
        if shell_join([flag, value]).endswith('"'):  # only plain variable references: they expand
            assert flag in ("--name", "--local-directory")
            expected = VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)
        assert read == expected, (argv, shell_join(argv))


def test_a_worker_name_with_a_variable_is_expanded_and_a_command_is_not():
    argv = ["--name", "test-$MY_ENV_VARIABLE", "--name", "$(touch /tmp/hpcgpu-shell-join-pwned)",
            "--x", "$MY_ENV_VARIABLE"]
    assert as_bash_reads(argv, {"MY_ENV_VARIABLE": "my-env-variable-value"}) == [
        "--name", "test-my-env-variable-value", "--name", "$(touch /tmp/hpcgpu-shell-join-pwned)",
        "--x", "$MY_ENV_VARIABLE"]
