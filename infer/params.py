"""Every setting of the inference algorithms in one place, and the named presets of nesting.

``NestingParams()`` is the default: the most accurate setting measured (the joint
scoreboard with densities, penalty and sibling rounds, then chain rounds).
``NestingParams.paper()`` is the 2003 scoreboard, for reproducing the paper;
``NestingParams.fast()`` runs at most two chain rounds. ``ConvolutionParams`` holds the
convolution algorithm's. The command line's defaults and the keywords of
``infer_nesting`` and ``infer_convolution`` are derived from these classes, never
repeated.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from tracefmt import ParameterError

__all__ = [
    "AUTO_LAG_QUANTA",
    "BOARDS",
    "CALIBRATE_FROM",
    "COUNT_ESTIMATES",
    "DELAY_ESTIMATES",
    "METHODS",
    "MIN_LAGS",
    "PRESETS",
    "ConvolutionParams",
    "NestingParams",
]

BOARDS = ("joint", "delay")
#: Where a keyed trace's calibration is learnt (``NestingParams.calibrate_from``).
CALIBRATE_FROM = ("twin", "keys")
#: Preset names, the default first.
PRESETS = ("accurate", "fast", "paper", "requests")

#: Keys a paths file's ``params`` holds besides the fields (output choices, not inference).
_OUTPUT_KEYS = frozenset({"top", "min_count", "window_s", "preset", "sort"})
#: The penalty weights, called x, y and z in the paper (and in paths files written before
#: they were named for what they weigh).
_PENALTIES = ("overlap_penalty", "same_node_penalty", "children_penalty")
_PAPER_NAMES = dict(zip(("x", "y", "z"), _PENALTIES, strict=True))


@dataclass(frozen=True, kw_only=True)
class NestingParams:
    """Every tuning parameter of ``infer_nesting`` (all recorded in the paths file).

    The field defaults are the ``accurate`` preset.

    Attributes
    ----------
    overlap_penalty, same_node_penalty, children_penalty : float
        Penalty weights (the paper's x, y, z): a candidate parent's score is divided by
        ``(1 + n) ** weight`` for the n of its other children that overlap this call,
        that call the same node, and that it has at all (the paper's most predictable
        setting: 2, 0, 0).
    bin_base, bin_min_s, bin_max_s : float
        Exponential delay bins: bin k covers ``bin_min_s * bin_base**(k-1)`` up to the
        next; the defaults resolve microseconds up to two hours.
    smooth_bins : float
        Standard deviation, in bins, of a Gaussian smoothing of every row of the delay
        scoreboard (tolerates clock skew that spreads a peak); 0 is off.
    tolerance_s : float
        Clock-skew tolerance when testing whether a call can be a parent.
    auto_tolerance : bool
        Estimate a clock-skew tolerance from the trace (``infer.candidates.skew_tolerance``:
        calls that lie outside every call into their node betray skewed clocks) and use
        it when it is larger than ``tolerance_s``.
    use_ids : bool
        Match calls and returns by id where the trace has ids.
    use_keys : bool
        Take the request keys the trace carries (``trace_id``, ``request_id``) as
        evidence (``infer.keys``): calls of one key belong to one request, calls of two
        never do. Off, they are ignored.
    density : bool
        Score a delay by its bin's count divided by the bin's width (a density)
        instead of the raw count (the paper's way). Wrong candidates spread evenly over
        time and exponential bins grow with the delay, so raw counts favour long
        delays; densities do not.
    board : {"joint", "delay"}
        ``"delay"`` is the paper's scoreboard: per (A, B, C), the histogram of the
        parent-call-to-child-call delay. ``"joint"`` also bins the child-return-to-
        parent-return gap and scores the pair of bins together: a parent answers a
        typical time after its last child returns, which wrong candidates do not.
    rounds : int
        Refinement rounds in which the penalties count the children each parent was
        given in the round before (nothing to do without a penalty).
    siblings : int
        Then rounds scoring each candidate by the gaps to the siblings it would have.
    chains : int
        Then at most this many chain rounds (``infer.chains``): each child moves, or
        swaps with a call to the same node, to where it most raises the likelihood of
        its node's chains of events, learnt from the round before.
    chain_min_gain : float
        Chain rounds stop once a round raises the log-likelihood by less than this
        many nats per call pair (or when nothing moves).
    request_rounds : int
        Then at most this many request rounds (``infer.request_model``): the parents of every
        window of overlapping visits chosen together by an integer program, each
        visit's whole tuple of children scored by the chain model and by the shapes
        the trace's sure visits show, each request by how many calls of each kind its
        type makes. They stop when nothing moves.
    request_window : int
        Most visits in one window of a request round (a larger set of overlapping visits
        is cut by call time). 64 right more requests on an idle machine, but its
        larger programs run out of their time more often on a loaded one
        (docs/inference.md, "Why it is not the default").
    request_tuples : int
        Tuples of children each visit offers a request round's solver at most (its best
        by score, and the one it has).
    calibrate_from : {"twin", "keys"}
        Where the calibration is learnt on a trace with request keys: a synthetic twin
        keyed as the trace is (``"twin"``), or the run's own keyed calls, hidden a fold
        at a time (``"keys"``, ``infer.keys.held_out_check``; a trace without enough
        keys falls back to the twin). docs/inference.md, "Request keys", measures both.
    calibrate : bool
        Make each parent's confidence a calibrated probability, learnt by running the
        same inference on a synthetic twin of the trace whose truth is known, and on a
        twin of that twin (``infer.calibration``): about three times the time. Without
        it the confidence is the last stage's own, uncalibrated. It changes no parent,
        and a preset with it turned off keeps the preset's name.

    Examples
    --------
    >>> NestingParams().chains, NestingParams.paper().chains
    (10, 0)
    >>> NestingParams.preset("paper", overlap_penalty=1.0).overlap_penalty
    1.0
    >>> NestingParams.from_json(NestingParams.fast().to_json()) == NestingParams.fast()
    True
    """

    overlap_penalty: float = 2.0
    same_node_penalty: float = 0.0
    children_penalty: float = 0.0
    bin_base: float = 1.05
    bin_min_s: float = 1e-6
    bin_max_s: float = 7200.0
    smooth_bins: float = 0.0
    tolerance_s: float = 0.0
    auto_tolerance: bool = True
    use_ids: bool = True
    use_keys: bool = True
    density: bool = True
    board: str = "joint"
    rounds: int = 2
    siblings: int = 1
    chains: int = 10
    chain_min_gain: float = 3e-3
    request_rounds: int = 0
    request_window: int = 48
    request_tuples: int = 32
    calibrate_from: str = "twin"
    calibrate: bool = True

    @classmethod
    def accurate(cls) -> NestingParams:
        """The default: the most accurate setting measured (``docs/inference.md``)."""
        return cls()

    @classmethod
    def fast(cls) -> NestingParams:
        """The accurate setting with at most two chain rounds: 1.3 times faster at
        parallelism 5 and 2.6 times at 45 (benchmarks/nesting.py), less exact where
        requests overlap heavily. (Without any chain round the refined scoreboards are
        less exact than the paper's on real traffic.)"""
        return cls(chains=2)

    @classmethod
    def paper(cls) -> NestingParams:
        """The 2003 scoreboard of Aguilera et al. (overlap penalty 2, the other two off, raw
        delay counts, one pass)."""
        return cls(
            density=False,
            board="delay",
            rounds=0,
            siblings=0,
            chains=0,
            auto_tolerance=False,
        )

    @classmethod
    def requests(cls) -> NestingParams:
        """The accurate setting with three request rounds after the chain rounds
        (``infer.request_model``): whole requests scored, the children of each window of
        overlapping visits chosen together. More exact where requests overlap heavily
        (docs/inference.md), several times slower there, and its confidence is not yet
        fitted as the default's is."""
        return cls(request_rounds=3)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> NestingParams:
        """The preset ``name`` (one of ``PRESETS``) with single fields overridden."""
        if name not in PRESETS:
            raise ParameterError(f"unknown preset {name!r} (must be one of {', '.join(PRESETS)})")
        return getattr(cls, name)().with_overrides(**overrides)

    def with_overrides(self, **overrides: Any) -> NestingParams:
        """A copy with the named fields replaced; an unknown name is an error."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ParameterError(
                f"unknown nesting parameter {unknown[0]!r} (known: {', '.join(sorted(known))})"
            )
        return replace(self, **overrides) if overrides else self

    @property
    def preset_name(self) -> str | None:
        """The preset these params equal, if any."""
        for name in PRESETS:
            # Calibration changes the confidence only, not the answer.
            preset = replace(
                getattr(type(self), name)(), calibrate=self.calibrate, calibrate_from=self.calibrate_from
            )
            if preset == self:
                return name
        return None

    def to_json(self) -> dict[str, Any]:
        """Every field, plus ``preset`` when the params equal a preset."""
        return {**asdict(self), "preset": self.preset_name}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> NestingParams:
        """Params from ``to_json()`` or a paths file's ``params``, so a run can be repeated.

        Fields missing from ``doc`` take the named preset's values; with no preset named,
        the defaults, or the paper's for a file written before presets existed (no
        ``preset`` key at all).
        """
        doc = {_PAPER_NAMES.get(k, k): v for k, v in doc.items()}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known - _OUTPUT_KEYS)
        if unknown:
            raise ParameterError(f"unknown nesting parameter {unknown[0]!r} in params")
        # Overridden settings list every field; a file from before presets: the paper's.
        name = doc.get("preset")
        base = cls.preset(name) if name in PRESETS else cls() if "preset" in doc else cls.paper()
        params = replace(base, **{k: v for k, v in doc.items() if k in known})
        params.check()
        return params

    def check(self) -> None:
        """Raise ``ParameterError`` naming the first bad parameter."""
        for name in (*_PENALTIES, "smooth_bins", "tolerance_s", "bin_base", "bin_min_s", "bin_max_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ParameterError(f"{name} must be a finite number, not {value}")
        for name in (*_PENALTIES, "smooth_bins", "tolerance_s"):
            if getattr(self, name) < 0:
                raise ParameterError(f"{name} must be >= 0, not {getattr(self, name)}")
        if not self.bin_base > 1.0:
            raise ParameterError(f"bin_base must be > 1, not {self.bin_base}")
        if not 0 < self.bin_min_s < self.bin_max_s:
            raise ParameterError(f"need 0 < bin_min_s < bin_max_s, not {self.bin_min_s}, {self.bin_max_s}")
        if self.smooth_bins > self.n_bins:
            # Wider than the whole histogram it flattens it, and asks for a kernel that size.
            raise ParameterError(
                f"smooth_bins must be at most the {self.n_bins:,} delay bins, not {self.smooth_bins:g}"
            )
        if self.n_bins > 1 << 20:
            raise ParameterError(
                f"{self.n_bins:,} delay bins are too many (raise bin_base or bin_min_s; at most {1 << 20:,})"
            )
        for name, top in (
            ("rounds", 20),
            ("siblings", 20),
            ("chains", 100),
            ("request_rounds", 20),
            ("request_window", 10_000),
            ("request_tuples", 10_000),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int) and 0 <= value <= top):
                raise ParameterError(f"{name} must be an integer from 0 to {top}, not {value!r}")
        for name in ("auto_tolerance", "use_ids", "use_keys", "density", "calibrate"):
            if not isinstance(getattr(self, name), bool):
                raise ParameterError(f"{name} must be true or false, not {getattr(self, name)!r}")
        if self.request_window < 2 or self.request_tuples < 1:
            raise ParameterError(
                "request_window must be at least 2 and request_tuples at least 1, "
                f"not {self.request_window} and {self.request_tuples}"
            )
        if not (math.isfinite(self.chain_min_gain) and self.chain_min_gain >= 0):
            raise ParameterError(f"chain_min_gain must be a number >= 0, not {self.chain_min_gain}")
        if self.calibrate_from not in CALIBRATE_FROM:
            raise ParameterError(
                f"unknown calibrate_from {self.calibrate_from!r} (must be one of {', '.join(CALIBRATE_FROM)})"
            )
        if self.board not in BOARDS:
            raise ParameterError(f"unknown scoreboard {self.board!r} (must be one of {', '.join(BOARDS)})")
        if self.board == "joint" and self.smooth_bins > 0:
            raise ParameterError(
                "smoothing applies to the delay scoreboard: use board='delay' with smooth_bins"
            )

    @property
    def penalized(self) -> bool:
        """Whether any penalty weight is on (penalty rounds do nothing without one)."""
        return bool(self.overlap_penalty or self.same_node_penalty or self.children_penalty)

    def ineffective(self) -> list[str]:
        """Settings that do nothing in this combination, each as a sentence.

        Examples
        --------
        >>> NestingParams(overlap_penalty=0.0).ineffective()
        ['rounds=2 does nothing without a penalty (a penalty weight > 0)']
        """
        notes = []
        if self.rounds and not self.penalized:
            notes.append(f"rounds={self.rounds} does nothing without a penalty (a penalty weight > 0)")
        if self.chain_min_gain != type(self)().chain_min_gain and not self.chains:
            notes.append("chain_min_gain does nothing without chain rounds (chains > 0)")
        default = type(self)()
        for name in ("request_window", "request_tuples"):
            if getattr(self, name) != getattr(default, name) and not self.request_rounds:
                notes.append(f"{name} does nothing without request rounds (request_rounds > 0)")
        if self.calibrate_from != default.calibrate_from and not (self.calibrate and self.use_keys):
            notes.append("calibrate_from does nothing without calibrate and use_keys")
        return notes

    @property
    def n_bins(self) -> int:
        """Delay bins on each side of zero (bin 0 holds everything below ``bin_min_s``)."""
        return math.ceil(math.log(self.bin_max_s / self.bin_min_s) / math.log(self.bin_base)) + 2


#: ``ConvolutionParams.max_lag_s`` when not given: this many quanta.
AUTO_LAG_QUANTA = 1000
#: Fewest lags the spike statistics of the convolution algorithm need as background.
MIN_LAGS = 10
#: How a spike's messages are counted, how its delay is read, and how edge pairs are
#: correlated: the choices of ``ConvolutionParams``, each default first.
COUNT_ESTIMATES = ("raw", "sqrt")
DELAY_ESTIMATES = ("centroid", "lag")
METHODS = ("auto", "fft", "direct")


def _choices(values: tuple[str, ...]) -> str:
    """``"a, b or c"``."""
    return f"{', '.join(values[:-1])} or {values[-1]}"


@dataclass(frozen=True)
class ConvolutionParams:
    """Every parameter of ``infer_convolution`` (all recorded in the paths file).

    Attributes
    ----------
    quantum_s : float
        Time resolution ``mu``: signals hold one value per quantum.
    max_lag_s : float, optional
        Longest causal delay looked for (at least ``MIN_LAGS`` quanta); by default
        ``AUTO_LAG_QUANTA`` quanta, set when the params are made.
    n_sigma, sep_sigma : float
        A spike is at least ``n_sigma`` standard deviations above the mean; two spikes are
        separated by a point at most ``sep_sigma`` above it (the paper: 4 and 3). Mean and
        deviation are those of lags 0 .. max_lag without the runs above ``sep_sigma``. The
        spike's pairs of messages must also be as unlikely under the background's Poisson
        rate as ``n_sigma`` deviations of a normal variable.
    band_s : float
        Delay band ``v``: spikes are sought in the correlation summed over
        ``[d - band, d + band]``, so delays that vary by about the band still peak.
    root : tuple of str, optional
        Node(s) the paths start from (one name may be given as a string). By default the
        nodes that start activity: senders of edges whose messages the edges into the
        sender explain less than ``root_share`` of (every edge of a node that receives
        nothing).
    min_count : float
        Drop hops (and paths) with fewer estimated messages.
    keep_short_paths : bool
        Keep what is dropped by default: a delay from vertex v to node C when a longer
        path from v returns to the same node and reaches C after the same total delay
        (within the quanta and band), the short path being that longer path seen with its
        middle left out.
    max_repeats : int
        How often a path may repeat a transition (edge in, edge out); a path ends where it
        would repeat more (cuts cycles).
    through_root : bool
        Let a path go on when it comes back to its root. By default it ends there: what
        the root sends next belongs to its next request (a client's think time), not to
        this path.
    keep_implausible : bool
        Keep what is dropped by default: peaks at negative lags whose tail reaches lag 0
        (an effect taken for a cause) and peaks at ``max_lag`` (cut off, not located).
    max_depth : int
        Most hops in a path.
    count_estimate : {"raw", "sqrt"}
        Estimate message counts from the correlation of raw counts (exact above the
        background) or from the square-rooted one (the paper's peak height; low when
        quanta hold several messages).
    delay_estimate : {"centroid", "lag"}
        Report a spike's delay as its centroid (sub-quantum) or as its peak lag times the
        quantum (the paper's way).
    root_share : float
        See ``root``.
    max_vertices : int
        Stop growing the graph beyond this many vertices (noted in the result).
    method : {"auto", "fft", "direct"}
        How each edge pair is correlated: FFT (O(S log S)), or by enumerating the pairs
        of occupied quanta within the lag window (exact as well; far cheaper when edges
        are sparse against S), or per pair whichever is estimated cheaper.

    Examples
    --------
    >>> p = ConvolutionParams(quantum_s=0.001, root="client")
    >>> p.max_lag_s, p.root, p.n_sigma
    (1.0, ('client',), 4.0)
    """

    quantum_s: float
    max_lag_s: float | None = None  # a number once made (``__post_init__``)
    n_sigma: float = 4.0
    sep_sigma: float = 3.0
    band_s: float = 0.0
    root: tuple[str, ...] | None = None
    min_count: float = 1.0
    keep_short_paths: bool = False
    max_repeats: int = 0
    through_root: bool = False
    keep_implausible: bool = False
    max_depth: int = 32
    count_estimate: str = COUNT_ESTIMATES[0]
    delay_estimate: str = DELAY_ESTIMATES[0]
    root_share: float = 0.5
    max_vertices: int = 100_000
    method: str = METHODS[0]

    def __post_init__(self) -> None:
        # The lags and roots are settled here, so that the paths file records those used.
        if self.max_lag_s is None and isinstance(self.quantum_s, int | float):
            object.__setattr__(self, "max_lag_s", AUTO_LAG_QUANTA * self.quantum_s)
        if isinstance(self.root, str):
            object.__setattr__(self, "root", (self.root,))
        elif self.root is not None and not isinstance(self.root, tuple):
            object.__setattr__(self, "root", tuple(self.root))

    def check(self) -> None:
        """Raise ``ParameterError`` naming the first bad parameter."""
        for name in ("quantum_s", "max_lag_s", "n_sigma", "sep_sigma", "band_s", "min_count", "root_share"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise ParameterError(f"{name} must be a finite number, not {value!r}")
        if not self.quantum_s > 0:
            raise ParameterError(f"quantum_s must be > 0, not {self.quantum_s}")
        if self.max_lag_s / self.quantum_s < MIN_LAGS:
            raise ParameterError(
                f"max_lag_s = {self.max_lag_s:g} s spans {int(self.max_lag_s / self.quantum_s)} lags of "
                f"quantum {self.quantum_s:g} s; the spike statistics need at least {MIN_LAGS} "
                f"(max_lag_s >= {MIN_LAGS * self.quantum_s:g})"
            )
        if not 0 <= self.sep_sigma <= self.n_sigma:
            raise ParameterError(
                f"need 0 <= sep_sigma <= n_sigma, not sep_sigma={self.sep_sigma}, n_sigma={self.n_sigma}"
            )
        for name in ("band_s", "min_count"):
            if getattr(self, name) < 0:
                raise ParameterError(f"{name} must be >= 0, not {getattr(self, name)}")
        if self.band_s > self.max_lag_s:
            # A band wider than the lags searched smooths nothing more, and its kernel of
            # band / quantum bins would take memory without bound.
            raise ParameterError(
                f"band_s = {self.band_s:g} s must be at most max_lag_s = {self.max_lag_s:g} s"
            )
        if not 0 < self.root_share <= 1:
            raise ParameterError(f"root_share must be in (0, 1], not {self.root_share}")
        for name, least in (("max_repeats", 0), ("max_depth", 1), ("max_vertices", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ParameterError(f"{name} must be an integer >= {least}, not {value!r}")
        if self.count_estimate not in COUNT_ESTIMATES:
            raise ParameterError(
                f"unknown count_estimate {self.count_estimate!r} (must be {_choices(COUNT_ESTIMATES)})"
            )
        if self.method not in METHODS:
            raise ParameterError(f"unknown method {self.method!r} (must be {_choices(METHODS)})")
        if self.delay_estimate not in DELAY_ESTIMATES:
            raise ParameterError(
                f"unknown delay_estimate {self.delay_estimate!r} (must be {_choices(DELAY_ESTIMATES)})"
            )

    @property
    def band_quanta(self) -> int:
        return round(self.band_s / self.quantum_s)
