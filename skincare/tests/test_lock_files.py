"""Dependencies install from a lock with hashes (docs/dependencies.md): every entry of both locks pinned and hashed,
every pin of the input files in its lock at that version, the runtime identical in both locks, and every
`pip install` of the Makefile and the Dockerfile with --require-hashes from a lock. Each check is shown to fail on
a bad example first."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCKS = {"requirements.in": "requirements.lock", "requirements-dev.in": "requirements-dev.lock"}
ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(?P<version>\S+)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
PIP_INSTALL = re.compile(r"pip install[^\n]*")


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_entries(text: str) -> tuple[dict[str, tuple[str, frozenset[str]]], list[str]]:
    """name -> (version, hashes) of a lock; and its problems: an entry without a pin or a hash, a stray line."""
    entries: dict[str, tuple[str, frozenset[str]]] = {}
    problems = []
    for block in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = block.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = ENTRY.match(line)
        if not match:
            problems.append(f"not a pinned entry: {line[:80]}")
            continue
        hashes = frozenset(HASH.findall(line))
        if not hashes:
            problems.append(f"no hash: {match['name']}=={match['version']}")
        entries[normal(match["name"])] = (match["version"], hashes)
    return entries, problems


def input_pins(path: Path) -> dict[str, str]:
    """The pins of an input file and of the input files it includes (-r)."""
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins |= input_pins(path.parent / line[3:].strip())
        elif match := ENTRY.match(line):
            pins[normal(match["name"])] = match["version"]
        elif line and not line.startswith("-c "):
            raise AssertionError(f"{path.name}: not a pin: {line}")
    return pins


def unlocked_installs(text: str) -> list[str]:
    """Every `pip install` that does not install a lock with --require-hashes (pip itself upgraded included)."""
    return [
        command
        for command in PIP_INSTALL.findall(text)
        if not ("--require-hashes" in command and re.search(r"-r \S+\.lock\b", command))
    ]


def test_every_entry_of_both_locks_is_pinned_with_its_hashes():
    for lock in LOCKS.values():
        entries, problems = lock_entries((ROOT / lock).read_text())
        assert problems == [], lock
        assert len(entries) > 20, lock


def test_control_an_entry_without_a_hash_or_a_pin_is_found():
    text = "django==5.2.19 \\\n    --hash=sha256:" + "a" * 64 + "\nrequests==2.34.2\nnumpy>=2\n"
    entries, problems = lock_entries(text)
    assert problems == ["no hash: requests==2.34.2", "not a pinned entry: numpy>=2"]
    assert entries["django"] == ("5.2.19", frozenset({"--hash=sha256:" + "a" * 64}))


def test_every_pin_of_the_inputs_is_in_its_lock_at_that_version():
    for source, lock in LOCKS.items():
        entries, _ = lock_entries((ROOT / lock).read_text())
        pins = input_pins(ROOT / source)
        assert {name: entries.get(name, ("missing", frozenset()))[0] for name in pins} == pins, lock


def test_the_runtime_is_the_same_bytes_in_both_locks():
    runtime, _ = lock_entries((ROOT / "requirements.lock").read_text())
    development, _ = lock_entries((ROOT / "requirements-dev.lock").read_text())
    assert {name: development.get(name) for name in runtime} == runtime


def test_make_and_the_image_install_only_a_lock_with_require_hashes():
    makefile, dockerfile = (ROOT / "Makefile").read_text(), (ROOT / "Dockerfile").read_text()
    assert unlocked_installs(makefile) == [] and unlocked_installs(dockerfile) == []
    assert "--require-hashes -r requirements-dev.lock" in makefile
    assert "--require-hashes -r requirements.lock" in dockerfile
    assert "COPY requirements.lock ." in dockerfile
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and unlocked_installs(ci) == []


def test_control_an_install_without_hashes_or_a_lock_is_found():
    text = (
        "\t$(PY) -m pip install --quiet --upgrade pip\n"
        "\t$(PY) -m pip install --quiet -r requirements-dev.lock\n"
        "RUN pip install --require-hashes -r requirements.txt\n"
        "\t$(PY) -m pip install --quiet --require-hashes -r requirements-dev.lock\n"
    )
    assert len(unlocked_installs(text)) == 3
