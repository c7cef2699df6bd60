"""The run-versus-run diff finds where time was added: hand-made cases and synthetic ground truth."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefmt import ParameterError
from viz.diff import diff_convolution, diff_dot, diff_paths

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "synth"

# multitier-slow.toml: WS2 waits 201 ms between calls instead of 1 ms.
INJECTED_S = 0.200


def _run(docs, *, auth=0.004, wait=0.001, db=0.010, count=10):
    v = docs.visit
    gap0 = 0.002
    ap_delay = gap0 + auth + wait
    ap = v("AP1", "WS1", 0.003 + db, ap_delay, v("DB1", "AP1", db, 0.003))
    root = v("WS1", "client", ap_delay + 0.003 + db + 0.001, None, v("AUTH", "WS1", auth, gap0), ap)
    return docs.paths_doc(("p", count, root))


def test_an_added_wait_is_found_where_it_is(docs):
    diff = diff_paths(_run(docs), _run(docs, wait=0.101))
    assert diff.sentence() == "WS1 -> AP1: +0.10 s in 10 of 10 requests"
    top = diff.changes[0]
    assert top["kind"] == "wait"
    assert top["where"] == "at WS1, between its call to AUTH returning and its call to AP1"
    assert all(abs(c["change_s"]) < 1e-9 for c in diff.changes[1:])


def _spread(visit: dict, std: float) -> dict:
    """``visit`` and all below it with every latency and delay spread by ``std``."""
    for key in ("latency_s", "delay_s"):
        if visit.get(key):
            visit[key] = {**visit[key], "std": std}
    for child in visit["children"]:
        _spread(child, std)
    return visit


def test_a_real_change_outranks_noise_in_a_frequent_pattern(docs):
    """A frequent pattern's mean moved by 4 ms with a spread of 50 ms (a few requests held
    up by other work) adds more time in all than a rarer pattern's real 10 ms with a
    spread of 2 ms; the real one is told apart from noise and comes first."""
    v = docs.visit

    def run(item_db: float, cart_db: float) -> dict:
        item = _spread(v("web", "client", 0.005 + item_db, None, v("db", "web", item_db, 0.002)), 0.05)
        cart = _spread(v("web", "client", 0.005 + cart_db, None, v("cache", "web", cart_db, 0.002)), 0.002)
        return docs.paths_doc(("item", 300, item), ("cart", 40, cart))

    diff = diff_paths(run(0.010, 0.005), run(0.014, 0.015))
    assert [p["id"] for p in diff.patterns] == ["cart", "item"]
    assert abs(diff.patterns[1]["added_s"]) > abs(diff.patterns[0]["added_s"])  # noise adds more
    assert abs(diff.patterns[1]["z"]) < 3 <= abs(diff.patterns[0]["z"])
    assert diff.sentence() == "web -> cache: +10 ms in 40 of 340 requests"
    # Without spreads (paths files that give none) the larger total still comes first.
    plain = diff_paths(_run(docs), _run(docs, wait=0.101))
    assert plain.changes[0]["z"] is None


def test_a_slower_leaf_is_blamed_not_its_callers(docs):
    diff = diff_paths(_run(docs), _run(docs, db=0.060))
    top = diff.changes[0]
    assert (top["label"], top["kind"]) == ("AP1 -> DB1", "leaf")
    assert top["change_s"] == pytest.approx(0.050)
    # The callers got 50 ms slower too, but they spent none of it themselves.
    assert all(abs(c["change_s"]) < 1e-9 for c in diff.changes[1:])


def test_a_slower_first_call_does_not_blame_the_wait_before_the_next(docs):
    diff = diff_paths(_run(docs), _run(docs, auth=0.054))
    assert (diff.changes[0]["label"], diff.changes[0]["kind"]) == ("WS1 -> AUTH", "leaf")
    waits = [c for c in diff.changes if c["kind"] == "wait"]
    assert all(abs(c["change_s"]) < 1e-9 for c in waits)


def test_unmatched_patterns_are_listed_not_compared(docs):
    v = docs.visit
    base = docs.paths_doc(("a", 5, v("WS1", "c", 0.01, None)), ("gone", 3, v("WS9", "c", 0.01, None)))
    slow = docs.paths_doc(("a", 5, v("WS1", "c", 0.02, None)), ("new", 2, v("WS7", "c", 0.5, None)))
    diff = diff_paths(base, slow)
    assert [p["id"] for p in diff.patterns] == ["a"]
    assert [p["count"] for p in diff.new] == [2]
    assert [p["count"] for p in diff.gone] == [3]
    assert diff.sentence() == "c -> WS1: +10 ms in 5 of 7 requests"
    assert diff_paths(base, slow, min_count=6).sentence().startswith("no pattern appears in both runs")


def test_a_node_called_twice_counts_its_requests_once(docs):
    """app calls backend twice in each of 200 requests, each call 1 ms slower: each
    request gained 2 ms, in 200 requests of 1 pattern (the visits were counted as
    requests: "+1 ms in 400 of 200 requests")."""
    v = docs.visit

    def run(backend: float) -> dict:
        calls = [v("backend", "app", backend, 0.001), v("backend", "app", backend, 0.002 + backend)]
        return docs.paths_doc(("p", 200, v("app", "client", 0.004 + 2 * backend, None, *calls)))

    diff = diff_paths(run(0.003), run(0.004))
    assert diff.sentence() == "app -> backend: +2 ms in 200 of 200 requests"
    top = diff.changes[0]
    assert (top["requests"], top["patterns"]) == (200, 1)
    assert top["impact_s"] == pytest.approx(0.4)
    assert "in 200 requests (1 pattern; +0.40 s in all)" in diff.text_lines(1)[0]


def test_a_change_within_noise_is_not_drawn_red(docs):
    """A leaf 5 ms slower (50%, past the size rule) with a spread of 100 ms over 20
    requests is 0.2 standard errors: grey, and said to be within noise."""
    v = docs.visit

    def run(db: float, std: float) -> dict:
        return docs.paths_doc(
            ("p", 20, _spread(v("web", "client", db + 0.001, None, v("db", "web", db, 0.0)), std))
        )

    dot = diff_dot(diff_paths(run(0.010, 0.1), run(0.015, 0.1)))
    assert "red3" not in dot
    assert diff_paths(run(0.010, 0.1), run(0.015, 0.1)).text_lines(1)[0].endswith("[within noise]")
    # The same change with a spread of 1 ms is 25 standard errors: red.
    assert "red3" in diff_dot(diff_paths(run(0.010, 0.001), run(0.015, 0.001)))


def test_the_diff_graph_numbers_patterns_as_the_report_does(docs):
    """The pattern that changed is #2 of the slow run by total time (the report's and viz
    draw's numbering), though it comes first in the diff."""
    v = docs.visit

    def run(cache: float) -> dict:
        big = v("web", "client", 0.050, None, v("db", "web", 0.040, 0.002))
        small = v("web", "client", 0.005 + cache, None, v("cache", "web", cache, 0.002))
        return docs.paths_doc(("big", 100, big), ("small", 10, small))

    diff = diff_paths(run(0.001), run(0.011))
    assert diff.patterns[0]["id"] == "small"
    assert diff.patterns[0]["rank"] == 2
    assert 'label="#2 small: 10 -> 10 instances' in diff_dot(diff)


def _with_auth(doc, node="WS2"):
    return sum(
        p["count"]
        for p in doc["patterns"]
        if p["root"]["node"] == node and any(c["node"] == "AUTH" for c in p["root"]["children"])
    )


def _paths(truth):
    return {**truth, "format": "wirepath.paths/1", "algorithm": "nesting"}


@pytest.mark.parametrize("source", ["truth", "inferred"])
def test_the_injected_delay_is_found_at_ws2_before_its_ap_call(runs, source):
    if source == "truth":
        base, slow = _paths(runs["base"]["truth"]), _paths(runs["slow"]["truth"])
    else:
        base, slow = runs["base"]["doc"], runs["slow"]["doc"]
    diff = diff_paths(base, slow, collapse=["AP*", "DB*"])
    top = diff.changes[0]
    assert top["key"] == ["wait", "WS2", "AP*", "AUTH"]
    tolerance = 0.002 if source == "truth" else 0.02
    assert top["change_s"] == pytest.approx(INJECTED_S, abs=tolerance)
    # In how many requests: the slow run's true requests where WS2 called AUTH.
    true_requests = _with_auth(runs["slow"]["truth"])
    if source == "truth":
        assert top["requests"] == true_requests
    else:
        assert top["requests"] == pytest.approx(true_requests, rel=0.1)
    assert re.fullmatch(r"WS2 -> AP\*: \+0\.2\d s in [\d,]+ of [\d,]+ requests", diff.sentence())
    # Nothing else moved by more than a few milliseconds per request.
    assert all(
        abs(c["change_s"]) < 0.2 * INJECTED_S or c["requests"] < 0.01 * diff.requests
        for c in diff.changes[1:]
    )


def test_the_diff_graph_is_red_exactly_where_the_delay_is(runs):
    diff = diff_paths(_paths(runs["base"]["truth"]), _paths(runs["slow"]["truth"]), collapse=["AP*", "DB*"])
    text = diff_dot(diff, top=4)
    labels = dict(re.findall(r'^\s*"(d\d+_\w+)" \[label="([^\\"]+)', text, re.M))
    red_edges = re.findall(r'^\s*"(d\d+_v\d+)" -> "(d\d+_v\d+)" \[label="[^"]*", color="red3"', text, re.M)
    assert red_edges
    for a, b in red_edges:
        assert (labels[a], labels[b]) == ("WS2", "AP*")
    red_nodes = re.findall(r'^\s*"(d\d+_v\d+)" \[label="[^"]*", color="red3"', text, re.M)
    assert {labels[n] for n in red_nodes} == {"WS2"}
    # The drawn red edges are those of the patterns where WS2 called AUTH first.
    drawn_with_auth = sum(1 for p in diff.patterns[:4] if "WS2>AUTH" in p["shape"])
    assert len(red_edges) == drawn_with_auth > 0
    assert "+200 ms" in text


def test_diff_refuses_convolution_and_bad_min_count(docs):
    conv = {"format": "wirepath.paths/1", "algorithm": "convolution", "paths": []}
    with pytest.raises(ParameterError, match="slow run is a convolution paths file"):
        diff_paths(_run(docs), conv)
    with pytest.raises(ParameterError, match="min_count must be at least 1"):
        diff_paths(_run(docs), _run(docs), min_count=0)


def _conv(wait_s, counts=(100, 50, 50, 40)):
    # Two linear paths sharing their first three hops, as docs/files.md describes them.
    return {
        "format": "wirepath.paths/1",
        "algorithm": "convolution",
        "paths": [
            {"nodes": ["c", "WS2", "AUTH", "WS2", "AP1"], "delays_s": [[0.002], [0.005], [wait_s]],
             "counts": list(counts)},
            {"nodes": ["c", "WS2", "AUTH", "WS2", "AP2"], "delays_s": [[0.002], [0.005], [wait_s, 0.5]],
             "counts": [*counts[:3], 10]},
        ],
    }  # fmt: skip


def test_convolution_diff_pools_hops_once():
    changes = diff_convolution(_conv(0.001), _conv(0.201))
    top = changes[0]
    assert top["label"] == "AUTH -> WS2 -> AP1"
    assert top["change_s"] == pytest.approx(0.2)
    assert top["messages"] == 40
    merged = diff_convolution(_conv(0.001), _conv(0.201), collapse=["AP*"])[0]
    assert (merged["label"], merged["messages"]) == ("AUTH -> WS2 -> AP*", 50)
    # The shared hops c -> WS2 -> AUTH and WS2 -> AUTH -> WS2 count once, not once per path.
    shared = [c for c in changes if c["label"] == "WS2 -> AUTH -> WS2"]
    assert shared[0]["messages"] == 50
    assert shared[0]["change_s"] == 0


def test_convolution_diff_compares_an_answer_hops_medians():
    # AUTH answers from a cache or not: the same two peaks in both runs, but more
    # misses in the slow one moved its median by 3 ms.
    base, slow = _conv(0.001), _conv(0.001)
    for doc, median in ((base, 0.002), (slow, 0.005)):
        for path in doc["paths"]:
            path["delays_s"][1] = [0.00004, 0.008]
            path["medians_s"] = [None, median, None]
    (change,) = [c for c in diff_convolution(base, slow) if c["label"] == "WS2 -> AUTH -> WS2"]
    assert change["change_s"] == pytest.approx(0.003)


# --- property: an injected wait is found exactly where it was put, whatever the tree --------

_shapes = st.recursive(
    st.just(()), lambda kids: st.lists(kids, min_size=1, max_size=3).map(tuple), max_leaves=8
)


def _build(shape, times, counter, keys, caller="c", delay=None):
    """A visit tree with serial children: own times are consumed from ``times`` in order
    (a leaf's whole visit, else the wait before each call and after the last); ``keys``
    gets, in the same order, the segment each time belongs to."""
    name = f"N{next(counter)}"
    if not shape:
        keys.append(["leaf", caller, name])
        return {
            "node": name,
            "caller": caller,
            "latency_s": {"mean": next(times)},
            "delay_s": delay,
            "children": [],
        }
    t, kids, prev = 0.0, [], ""
    for sub in shape:
        t += next(times)
        at = len(keys)
        keys.append(None)  # the wait before this call; its callee is named below
        kid = _build(sub, times, counter, keys, name, {"mean": t})
        keys[at] = ["wait", name, kid["node"], prev]
        kids.append(kid)
        prev = kid["node"]
        t += kid["latency_s"]["mean"]
    t += next(times)
    keys.append(["reply", name, caller])
    return {"node": name, "caller": caller, "latency_s": {"mean": t}, "delay_s": delay, "children": kids}


def _segments_in(shape):
    return 1 if not shape else len(shape) + 1 + sum(_segments_in(s) for s in shape)


@settings(max_examples=60, deadline=None)
@given(shape=_shapes, data=st.data())
def test_an_injected_wait_is_found_exactly_where_it_was_put(shape, data):
    n = _segments_in(shape)
    own = data.draw(st.lists(st.floats(0.001, 0.05), min_size=n, max_size=n))
    where = data.draw(st.integers(0, n - 1))
    slower = list(own)
    slower[where] += 0.2

    keys: list = []

    def doc(times):
        keys.clear()
        root = _build(shape, iter(times), itertools.count(), keys)
        return {"format": "wirepath.paths/1", "algorithm": "nesting",
                "patterns": [{"id": "p", "count": 3, "total_latency_s": 1.0, "root": root}]}  # fmt: skip

    same = diff_paths(doc(own), doc(own))
    assert all(abs(c["change_s"]) < 1e-12 for c in same.changes)
    diff = diff_paths(doc(own), doc(slower))
    assert diff.changes[0]["key"] == keys[where]
    assert diff.changes[0]["change_s"] == pytest.approx(0.2)
    assert all(abs(c["change_s"]) < 1e-9 for c in diff.changes[1:])
    # The same segment, found by injecting into the base instead: the opposite change.
    back = diff_paths(doc(slower), doc(own))
    assert back.changes[0]["key"] == diff.changes[0]["key"]
    assert back.changes[0]["change_s"] == pytest.approx(-0.2)


def test_petstore_mylist_delay_is_found_in_mylist():
    # The paper's PetStore experiment: petstore-slow.toml makes mylist.jsp wait 50 ms more
    # before its first call (to ProfileEJB).
    from dataclasses import replace

    import infer
    import synth

    docs, truth = {}, None
    for name in ("petstore", "petstore-slow"):
        config = replace(synth.load_config(SAMPLES / f"{name}.toml"), messages=30_000, seed=11)
        trace, truth = synth.generate_table(config)
        docs[name] = infer.infer_nesting(trace).to_json()
    diff = diff_paths(docs["petstore"], docs["petstore-slow"])
    top = diff.changes[0]
    assert top["key"] == ["wait", "mylist.jsp", "ProfileEJB", ""]
    assert top["change_s"] == pytest.approx(0.050, abs=0.003)

    def has(v, node):
        return v["node"] == node or any(has(c, node) for c in v["children"])

    true_requests = sum(p["count"] for p in truth["patterns"] if has(p["root"], "mylist.jsp"))
    assert top["requests"] == pytest.approx(true_requests, rel=0.05)


_MIX = """\
nodes = ["client", "web", "app", "db"]

[trace]
seed = 3
messages = 40000
resolution_s = 1e-6
"""
_MIX_TRACELET = """
[[tracelet]]
name = "{name}"
client = "client"
clients = {clients}
think_s = [0.0, 0.02]
[[tracelet.call]]
id = "web"
to = "web"
before_s = [0.001, 0.0002]
after_s = [0.001, 0.0002]
[[tracelet.call]]
id = "app"
parent = "web"
to = "app"
before_s = [0.002, 0.0004]
[[tracelet.call]]
id = "db"
parent = "app"
to = "db"
before_s = [{db}, 0.001]
"""


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    """Two runs: one client in ten makes requests of the same shape whose database visit
    is 40 ms longer in the slow run; name -> (paths, instances, truth)."""
    from wirepath.cli import main

    tmp_path = tmp_path_factory.mktemp("mixture")
    runs = {}
    for name, unlucky_db in (("base", 0.005), ("slow", 0.045)):
        cfg = tmp_path / f"{name}.toml"
        text = _MIX + _MIX_TRACELET.format(name="usual", clients=9, db=0.005)
        cfg.write_text(text + _MIX_TRACELET.format(name="unlucky", clients=1, db=unlucky_db))
        trace, truth = tmp_path / f"{name}.parquet", tmp_path / f"{name}-truth.json"
        assert main(["synth", str(cfg), "--out", str(trace), "--truth", str(truth), "--quiet"]) == 0
        paths, inst = tmp_path / f"{name}-paths.json", tmp_path / f"{name}-i.parquet"
        argv = ["infer", "nesting", str(trace), "--out", str(paths), "--instances", str(inst), "--quiet"]
        assert main(argv) == 0
        runs[name] = (paths, inst, truth)
    return runs


def test_a_delay_in_a_few_requests_is_counted_in_those_requests(mixture):
    """Means say +1.4 ms in every request; every request's latency (the instances tables)
    says +40 ms in the slowed ones, as many as the truth has."""
    import json

    import infer
    from tracefmt import read_paths

    # The truth: the slow run's requests of the unlucky client (its own tracelet's count).
    runs = mixture
    truth = json.loads(runs["slow"][2].read_text())
    slowed = min(p["count"] for p in truth["patterns"])
    assert 150 < slowed < 400
    base, slow = read_paths(runs["base"][0]), read_paths(runs["slow"][0])
    tables = (infer.read_instances(runs["base"][1]), infer.read_instances(runs["slow"][1]))
    diff = diff_paths(base, slow, instances=tables)
    top = diff.changes[0]
    assert top["label"] == "app -> db"
    assert top["changed_requests"] == pytest.approx(slowed, rel=0.1)
    assert top["changed_delta_s"] == pytest.approx(0.040, rel=0.1)
    assert re.fullmatch(
        r"app -> db: \+(39|40|41)\.\d+ ms in [\d,]+ of [\d,]+ requests \(\d% of the [\d,]+ that pass there\)",
        diff.sentence(),
    )
    # By the means alone: the small change in all of them.
    assert diff_paths(base, slow).changes[0]["change_s"] < 0.005
    shift = next(p["shift"] for p in diff.patterns if p["count_slow"] > 1000)
    assert shift["significant"]
    assert shift["slow_s"][2] > shift["base_s"][2] + 0.03  # p99 of the slow run: the slowed ones


@pytest.mark.needs_dot
def test_viz_diff_and_report_count_the_changed_requests(mixture, tmp_path, capsys):
    from wirepath.cli import main

    (bp, bi, _), (sp, si, _) = mixture["base"], mixture["slow"]
    assert (
        main(
            [
                "viz",
                "diff",
                str(bp),
                str(sp),
                "--out",
                str(tmp_path / "d.svg"),
                "--instances",
                str(bi),
                str(si),
            ]
        )
        == 0
    )
    sentence = capsys.readouterr().out.splitlines()[0]
    assert re.match(r"app -> db: \+(39|40|41)\.\d+ ms in [\d,]+ of [\d,]+ requests", sentence), sentence
    page = tmp_path / "r.html"
    argv = ["report", str(sp), "--diff", str(bp), "--instances", str(si), "--diff-instances", str(bi)]
    assert main([*argv, "--out", str(page)]) == 0
    capsys.readouterr()
    assert sentence.replace(">", "&gt;") in page.read_text()
    # The base run's instances without this run's: one line saying what goes with what.
    assert main(["report", str(sp), "--diff", str(bp), "--diff-instances", str(bi), "--out", str(page)]) == 1
    assert "--diff-instances needs --diff and --instances" in capsys.readouterr().err


def test_the_sentence_names_the_operation_where_the_time_went(docs):
    """Visits carrying their operations (a labelled capture): the change is named by the
    call it was spent on."""
    v = docs.visit

    def run(db: float) -> dict:
        call = v("db", "app", db, 0.001)
        call["ops"] = [{"op": "SELECT items", "share": 1.0}]
        root = v("app", "client", db + 0.002, None, call)
        root["ops"] = [{"op": "GET /item/:id", "share": 1.0}]
        return docs.paths_doc(("p", 50, root))

    diff = diff_paths(run(0.005), run(0.045))
    assert diff.sentence() == "app -> db (SELECT items): +40 ms in 50 of 50 requests"
    assert diff.changes[0]["op"] == "SELECT items"
    # Without operations, as before.
    assert (
        diff_paths(_run(docs), _run(docs, wait=0.101)).sentence()
        == "WS1 -> AP1: +0.10 s in 10 of 10 requests"
    )


def test_instances_with_convolution_paths_is_one_error(tmp_path, capsys):
    import json

    from wirepath.cli import main

    doc = {
        "format": "wirepath.paths/1",
        "algorithm": "convolution",
        "paths": [{"nodes": ["c", "a", "b"], "delays_s": [[0.002]], "counts": [10, 10]}],
    }
    for name in ("b.json", "s.json"):
        (tmp_path / name).write_text(json.dumps(doc))
    (tmp_path / "i.parquet").write_bytes(b"")
    argv = [
        "viz",
        "diff",
        str(tmp_path / "b.json"),
        str(tmp_path / "s.json"),
        "--out",
        str(tmp_path / "d.svg"),
    ]
    assert main([*argv, "--instances", str(tmp_path / "i.parquet"), str(tmp_path / "i.parquet")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --instances applies to nesting paths files (convolution has none)"]
    assert not (tmp_path / "d.svg").exists()


def _stats(mean, p50, p90, p99):
    return {"mean": mean, "p50": p50, "p90": p90, "p99": p99, "std": 0.001}


def _two_hop(db_latency, ap_delay):
    """client -> WS -> AP -> DB, a thousand requests; the DB's latency and the AP call's delay given."""
    quick = _stats(0.001, 0.001, 0.001, 0.001)
    db = {"node": "DB", "caller": "AP", "latency_s": db_latency, "delay_s": quick, "children": []}
    ap = {"node": "AP", "caller": "WS", "latency_s": _stats(0.02, 0.02, 0.03, 0.04), "delay_s": ap_delay,
          "children": [db]}  # fmt: skip
    root = {"node": "WS", "caller": "client", "latency_s": _stats(0.03, 0.03, 0.05, 0.06), "delay_s": None,
            "children": [ap]}  # fmt: skip
    return {"format": "wirepath.paths/1", "algorithm": "nesting",
            "patterns": [{"id": "p", "count": 1000, "total_latency_s": 30.0, "root": root}]}  # fmt: skip


def test_a_change_shows_the_distribution_where_it_is_spent():
    # The DB slowed in its tail only (p90 and p99), the mean a little: the change is told
    # with the DB's latency quantiles in both runs.
    quick = _stats(0.001, 0.001, 0.001, 0.001)
    base = _two_hop(_stats(0.010, 0.010, 0.012, 0.014), quick)
    slow = _two_hop(_stats(0.014, 0.010, 0.050, 0.052), quick)
    d = diff_paths(base, slow)
    top = d.changes[0]
    assert top["label"] == "AP -> DB"
    assert top["quantiles"] == {
        "visit": "AP -> DB latency", "of": ["p50", "p90", "p99"],
        "base_s": [0.010, 0.012, 0.014], "slow_s": [0.010, 0.050, 0.052],
    }  # fmt: skip
    text = d.text_lines(1)
    assert text[1].strip() == "AP -> DB latency: p50 10 ms -> 10 ms, p90 12 ms -> 50 ms, p99 14 ms -> 52 ms"
    # A wait before a call shows in that call's delay.
    base = _two_hop(_stats(0.010, 0.010, 0.012, 0.014), _stats(0.001, 0.001, 0.002, 0.003))
    slow = _two_hop(_stats(0.010, 0.010, 0.012, 0.014), _stats(0.041, 0.041, 0.042, 0.043))
    top = diff_paths(base, slow).changes[0]
    assert top["quantiles"]["visit"] == "WS -> AP call delay"
    assert top["quantiles"]["slow_s"] == [0.041, 0.042, 0.043]
