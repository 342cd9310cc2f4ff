"""vf-build: wheels of environment packages and a PEP 503 index that pip can read."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

from verifiers.cli.build import main as vf_build
from verifiers.errors import ConfigError
from verifiers.hub.build import build_hub, build_wheel, resolve_environment_dir
from verifiers.hub.index import add_wheels, normalize_project_name, parse_index_links, scan_hub, write_index
from verifiers.hub.scaffold import scaffold_environment

_VOID = {"meta", "br", "link", "img", "input", "hr"}


class _StructureChecker(HTMLParser):
    """Minimal HTML5 well-formedness: balanced non-void tags, one html/head/body, a title."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.seen: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append(tag)
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unbalanced </{tag}>")


def assert_valid_html5(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>\n")
    checker = _StructureChecker()
    checker.feed(page)
    checker.close()
    assert not checker.errors and not checker.stack, (checker.errors, checker.stack)
    for tag in ("html", "head", "body", "title"):
        assert checker.seen.count(tag) == 1, tag
    assert '<meta charset="utf-8">' in page


def read_hub(hub: Path) -> dict[str, dict[str, str]]:
    """Follow the index as pip would: {project: {filename: sha256}}; checks every link on the way."""
    root_url = (hub / "simple" / "index.html").as_uri()
    root_page = (hub / "simple" / "index.html").read_text()
    assert_valid_html5(root_page)
    projects: dict[str, dict[str, str]] = {}
    for link in parse_index_links(root_page):
        assert link.text == normalize_project_name(link.text)
        assert link.href == f"{link.text}/"
        page_path = Path(urlparse(urljoin(root_url, link.href)).path) / "index.html"
        page = page_path.read_text()
        assert_valid_html5(page)
        files = {}
        for file_link in parse_index_links(page):
            target = Path(urlparse(urljoin(page_path.as_uri(), file_link.url)).path)
            assert target.is_file(), file_link.href
            assert target.name == file_link.text
            assert file_link.sha256 == hashlib.sha256(target.read_bytes()).hexdigest()
            assert file_link.requires_python == ">=3.11"
            files[file_link.text] = file_link.sha256
        projects[link.text] = files
    return projects


@pytest.fixture
def two_packages(tmp_path: Path, helpers) -> tuple[Path, Path]:
    root = tmp_path / "environments"
    reverse = helpers.copy_bundled("reverse_text", root)
    scaffold = Path(scaffold_environment("Fresh_Env", root, kind="tool").package_dir)
    return reverse, scaffold


def test_build_writes_a_pep503_index_of_both_packages(
    tmp_path: Path, two_packages: tuple[Path, Path]
) -> None:
    hub = tmp_path / "hub"
    environments = two_packages[0].parent
    assert (
        vf_build(["--environments-dir", str(environments), "--out", str(hub), "--no-verifiers"]) == 0
    )  # default: all packages

    projects = read_hub(hub)
    assert projects.keys() == {"fresh-env", "reverse-text"}
    assert list(projects["reverse-text"]) == ["reverse_text-0.1.0-py3-none-any.whl"]
    assert list(projects["fresh-env"]) == ["fresh_env-0.1.0-py3-none-any.whl"]
    assert "&gt;=3.11" in (hub / "simple" / "reverse-text" / "index.html").read_text()  # attribute is escaped
    with zipfile.ZipFile(hub / "files" / "reverse_text-0.1.0-py3-none-any.whl") as zf:
        names = zf.namelist()
        entry_points = zf.read("reverse_text-0.1.0.dist-info/entry_points.txt").decode()
    assert "reverse_text/words.txt" in names  # package data travels with the wheel
    assert "reverse-text = reverse_text:load_environment" in entry_points
    assert not any(n.startswith("tests/") for n in names)
    # The sources were built from a copy: no build leftovers in the package folders.
    for package in two_packages:
        assert not (package / "build").exists()
        assert not list(package.glob("*.egg-info"))


def test_rebuilds_are_idempotent_and_new_versions_join_old_ones(tmp_path: Path, built_hub, helpers) -> None:
    # built_hub already holds 0.1.0 and 0.2.0, built one after the other from the same folder.
    hub = Path(shutil.copytree(built_hub.dir, tmp_path / "hub"))
    package = Path(shutil.copytree(built_hub.package_dir, tmp_path / "src" / built_hub.package_dir.name))
    page = hub / "simple" / "hubtest-env" / "index.html"
    before, files = page.read_text(), read_hub(hub)["hubtest-env"]
    assert sorted(files) == ["hubtest_env-0.1.0-py3-none-any.whl", "hubtest_env-0.2.0-py3-none-any.whl"]

    again = build_hub([package], hub)  # unchanged source: byte-identical wheel, nothing changes
    assert [f.filename for f in again.built] == ["hubtest_env-0.2.0-py3-none-any.whl"]
    assert page.read_text() == before

    helpers.set_version(package, "0.3.0")
    assert vf_build([str(package), "--out", str(hub), "--no-verifiers"]) == 0
    newer = read_hub(hub)["hubtest-env"]
    assert sorted(newer) == [*sorted(files), "hubtest_env-0.3.0-py3-none-any.whl"]
    assert {k: newer[k] for k in files} == files  # old versions untouched

    # Changing a published version without bumping it is refused (pip pins by hash) ...
    init = package / "hubtest_env" / "__init__.py"
    init.write_text(init.read_text() + "\nCHANGED = True\n")
    assert vf_build([str(package), "--out", str(hub), "--no-verifiers"]) == 2
    assert read_hub(hub)["hubtest-env"] == newer
    # ... unless asked for.
    assert vf_build([str(package), "--out", str(hub), "--overwrite", "--no-verifiers"]) == 0
    replaced = read_hub(hub)["hubtest-env"]
    assert replaced["hubtest_env-0.3.0-py3-none-any.whl"] != newer["hubtest_env-0.3.0-py3-none-any.whl"]
    assert {k: replaced[k] for k in files} == files


def test_index_follows_the_files_folder(tmp_path: Path, built_hub) -> None:
    hub = Path(shutil.copytree(built_hub.dir, tmp_path / "hub"))
    wheels = sorted((hub / "files").glob("*.whl"))
    assert [w.name for w in wheels] == [
        "hubtest_env-0.1.0-py3-none-any.whl",
        "hubtest_env-0.2.0-py3-none-any.whl",
    ]

    # A wheel dropped in by hand (e.g. built elsewhere) is picked up by add_wheels.
    other = tmp_path / "elsewhere"
    other.mkdir()
    odd = other / "Odd.Name-1.0-py3-none-any.whl"
    shutil.copyfile(wheels[0], odd)
    add_wheels(hub, [odd])
    assert "odd-name" in read_hub(hub)

    # Removing files and rewriting drops their links, and then the project.
    (hub / "files" / odd.name).unlink()
    wheels[0].unlink()
    write_index(hub)
    projects = read_hub(hub)
    assert projects == {"hubtest-env": {wheels[1].name: hashlib.sha256(wheels[1].read_bytes()).hexdigest()}}
    assert not (hub / "simple" / "odd-name").exists()
    assert [f.version for f in scan_hub(hub)] == ["0.2.0"]


def test_build_errors_name_the_problem(tmp_path: Path, helpers) -> None:
    broken = Path(scaffold_environment("broken-env", tmp_path).package_dir)
    pyproject = broken / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('packages = ["broken_env"]', 'packages = ["missing_pkg"]')
    )
    with pytest.raises(ConfigError, match=r"building a wheel of .*broken_env failed"):
        build_wheel(broken, tmp_path / "out")
    with pytest.raises(ConfigError, match="not found under"):
        resolve_environment_dir("no-such-env", tmp_path)
    assert resolve_environment_dir("broken-env", tmp_path) == broken  # an id finds its module folder
    with pytest.raises(ConfigError, match=r"no pyproject\.toml"):
        build_wheel(tmp_path, tmp_path / "out")
    with pytest.raises(ConfigError, match="not a wheel file name"):
        add_wheels(tmp_path / "hub", [pyproject])
