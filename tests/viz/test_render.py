"""Rendering with the real dot binary, and the error when it is missing."""

from __future__ import annotations

import pytest

from tracefmt import MissingToolError, ParameterError, WirepathError
from viz.render import render_dot, write_graph

GRAPH = 'digraph "g" { "a" -> "b" [label="+1 ms"]; }\n'


@pytest.mark.needs_dot
@pytest.mark.parametrize(
    ("fmt", "magic"), [("svg", b"<svg"), ("png", b"\x89PNG\r\n\x1a\n"), ("pdf", b"%PDF-")], ids=str
)
def test_dot_renders_each_format(fmt, magic):
    data = render_dot(GRAPH, fmt)
    assert magic in data[:400]


@pytest.mark.needs_dot
def test_write_graph_takes_the_format_from_the_file_name(tmp_path):
    out = write_graph(GRAPH, tmp_path / "sub" / "g.png")
    assert out.read_bytes().startswith(b"\x89PNG")
    assert not list((tmp_path / "sub").glob(".*partial"))


def test_dot_text_needs_no_binary(tmp_path, monkeypatch):
    monkeypatch.setenv("WIREPATH_DOT", "no-such-dot-binary")
    assert write_graph(GRAPH, tmp_path / "g.dot").read_text() == GRAPH


def test_missing_binary_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("WIREPATH_DOT", "no-such-dot-binary")
    with pytest.raises(MissingToolError, match="apt-get install graphviz"):
        write_graph(GRAPH, tmp_path / "g.svg")
    assert not (tmp_path / "g.svg").exists()


@pytest.mark.needs_dot
def test_a_graph_dot_rejects_is_reported():
    with pytest.raises(WirepathError, match="dot failed"):
        render_dot("digraph { a -> ", "svg")


def test_unknown_formats_are_named(tmp_path):
    with pytest.raises(ParameterError, match="unknown picture format 'gif'"):
        render_dot(GRAPH, "gif")
    with pytest.raises(ParameterError, match=r"use \.svg, \.png, \.pdf or \.dot"):
        write_graph(GRAPH, tmp_path / "g.jpeg")
