"""The one path rule (:mod:`hpcgpu.system.safedir`): a directory is accepted only where no
other user can replace anything from ``/`` down to what hpcgpu makes in it; checked against
what the kernel lets ``nobody`` do."""

from __future__ import annotations

import os
import shutil
import stat
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attacker import NOBODY, as_nobody, can_act_as_nobody
from hpcgpu.system.safedir import HeldDirectory, check_private_path, exposure

pytestmark = pytest.mark.skipif(not can_act_as_nobody(), reason="needs root to act as nobody")


@pytest.fixture
def base():
    """A directory everyone may enter (pytest's tmp_path is not), that only root can write."""
    path = Path(tempfile.mkdtemp(prefix="hpcgpu-safedir-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make(path: Path, mode: int, owner: int = 0, acl: int | None = None) -> Path:
    """``path`` with ``mode``, ``owner``, nobody's group, and an access control list that
    gives nobody rwx under a mask ``acl`` (None: no ACL)."""
    path.mkdir()
    os.chown(path, owner, NOBODY)
    os.chmod(path, mode)
    if acl is not None:
        grant_nobody(path, acl)
    return path


def grant_nobody(path: Path, mask: int) -> None:
    """``setfacl -m u:nobody:rwx,m:<mask>``, written as the kernel's xattr (no acl tools
    here); the mode's own bits stay in the owner, owning-group and other entries."""
    mode, any_id = stat.S_IMODE(os.stat(path).st_mode), 0xFFFFFFFF
    entries = [(0x01, mode >> 6 & 7, any_id), (0x02, 7, NOBODY), (0x04, mode >> 3 & 7, any_id),
               (0x10, mask, any_id), (0x20, mode & 7, any_id)]
    os.setxattr(path, "system.posix_acl_access",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))


def test_a_directory_of_ones_own_passes(base):
    work = make(base / "w", 0o700)
    assert exposure(work) is None and check_private_path(work, "--work-dir") == work


def test_world_writable_without_sticky_bit_is_refused_with_the_fix(base):
    make(base / "shared", 0o777)
    with pytest.raises(ValueError, match=r"--work-dir .*/shared/w: .*/shared is writable by every "
                       r"user \(mode 0777\) and has no sticky bit: another user could replace .* "
                       r"\(mkdir -m 700"):
        check_private_path(base / "shared" / "w", "--work-dir")


def test_sticky_passes_only_with_the_next_component_ours(base):
    shared = make(base / "scratch", 0o1777)
    assert exposure(shared) is None  # what hpcgpu makes there is its own
    make(shared / "mine", 0o755)
    assert exposure(shared / "mine") is None
    theirs = make(shared / ".hpcgpu", 0o777, owner=NOBODY)
    found = exposure(theirs / "job")
    assert found.path == str(shared) and "belongs to uid 65534" in found.reason


def test_owned_by_another_user_is_refused_even_read_only(base):
    found = exposure(make(base / "theirs", 0o755, owner=NOBODY))
    assert found.reason == "belongs to uid 65534, who can change it"


def test_group_writable_is_refused_and_said_so(base):
    found = exposure(make(base / "project", 0o2775))
    assert found.group_only and "members of group 65534" in found.reason


def test_an_access_control_list_that_lets_another_user_write_is_refused(base):
    """#38's class: ``drwxrwx---+`` of root's, whose group is root's own, passed the mode-bit
    rule while the ACL let nobody write it (and rename what hpcgpu made in it)."""
    work = make(base / "w", 0o700, acl=0o7)
    mine = make(work / "job", 0o700)
    found = exposure(work / "job")
    assert found.path == str(work) and not found.group_only
    assert found.reason == (f"is writable by uid {NOBODY} through its access control list "
                            f"(getfacl {work}) and has no sticky bit")
    assert nobody_can_replace(work, mine)  # what the rule refuses, the kernel allows
    with pytest.raises(ValueError, match="through its access control list"):
        HeldDirectory(work, "--work-dir")
    masked = make(base / "masked", 0o700, acl=0o5)  # chmod g-w: the mask takes write away
    assert exposure(masked) is None and not nobody_can_replace(masked, make(masked / "job", 0o700))


def test_a_link_is_judged_by_where_it_leads(base):
    target = make(base / "open", 0o777)
    (base / "link").symlink_to(target)
    assert exposure(base / "link").path == str(target)


def test_held_directory_writes_relative_to_what_was_checked(base):
    work = make(base / "w", 0o700)
    held = HeldDirectory(work, "--work-dir")
    job = held.make_private("job")
    os.rename(work, base / "moved")  # the path now leads nowhere; the descriptors still hold
    assert job.write_private("key.pem", "x") == work / "job" / "key.pem"
    assert (base / "moved" / "job" / "key.pem").read_text() == "x"
    with pytest.raises(FileExistsError):
        job.write_private("key.pem", "again")  # never an existing file, never through a link
    job.close(), held.close()


def nobody_can_replace(directory: Path, entry: Path) -> bool:
    """Whether nobody can put something of theirs where ``entry`` is: rename it away
    (after a chmod of ``directory`` where nobody owns it)."""
    def attack() -> bool:
        try:
            if os.stat(directory).st_uid == NOBODY:
                os.chmod(directory, 0o777)
            os.rename(entry, entry.with_name(entry.name + ".moved"))
        except PermissionError:
            return False
        return True
    return as_nobody(attack)


# Every directory's group is nobody's, so the attacker stands for the group and the others at
# once; hence no mode that gives others more than the group (0757: the kernel applies the
# group's bits to a member, the rule rightly refuses it for everyone else).
_DIR = st.tuples(st.sampled_from([0, NOBODY]),  # owner
                 st.sampled_from([0o755, 0o775, 0o777, 0o1777, 0o1775, 0o2775, 0o3777]),
                 st.sampled_from([None, None, 0o7, 0o5]))  # an ACL for nobody, its mask


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_DIR, min_size=1, max_size=3))
def test_accepted_exactly_where_nobody_cannot_replace_a_component(chain):
    """The rule is neither too weak nor too strict: a path passes exactly when the kernel
    lets nobody rename no directory of it, nor an entry the user makes in it."""
    base = Path(tempfile.mkdtemp(prefix="hpcgpu-safedir-"))
    try:
        os.chmod(base, 0o755)
        path = base
        for index, (owner, mode, acl) in enumerate(chain):
            path = make(path / f"d{index}", mode, owner, acl)
        dirs = [base, *[base.joinpath(*[f"d{i}" for i in range(n + 1)]) for n in range(len(chain))]]
        accepted = exposure(path) is None
        mine = make(path / "mine", 0o700)  # what hpcgpu would make there
        entries = [*dirs[1:], mine]
        replaceable = any(nobody_can_replace(d, e) for d, e in zip(dirs, entries))
        assert accepted == (not replaceable), (chain, exposure(path))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_path_that_cannot_be_examined_is_refused(base):
    hidden = make(base / "hidden", 0o700)  # root's: nobody cannot look inside
    with pytest.raises(ValueError, match=r"cannot examine .*/hidden/w \(Permission denied\)"):
        as_nobody(exposure, hidden / "w")
