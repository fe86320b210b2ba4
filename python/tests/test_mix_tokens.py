"""tessera.mix(unit="tokens"): weights are shares of tokens, not of samples.
Two sets of token lists whose records hold different numbers of real tokens;
the tokens each component delivers over a long stream are counted from the
batches, independently of how the mixture converts the weights."""

from __future__ import annotations

import os
from typing import Dict, Tuple

import numpy as np
import pytest

import tessera
from tessera.errors import ArgumentError


def delivered(mix: tessera.Mixture, samples: int) -> Dict[str, int]:
    """Real tokens each component delivered in the first `samples` samples,
    counted from the batches; a record's component is the parity of its `n`
    (even: short, odd: long; see the fixture)."""
    out = {"short": 0, "long": 0}
    seen = 0
    for b in mix.loader(1000, drop_last=False, threads=1):
        toks = np.asarray(b["tokens"])
        n = np.asarray(b["n"])
        for row, k in zip(toks, n):
            out["short" if k % 2 == 0 else "long"] += int(np.count_nonzero(row))
        seen += len(n)
        if seen >= samples:
            break
    return out


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Tuple[str, float]]:
    root = str(tmp_path_factory.mktemp("mixtok"))
    out = {}
    for name, mean, seed, parity in (("short", 8, 1, 0), ("long", 40, 2, 1)):
        rng = np.random.default_rng(seed)
        n, length = 20_000, 64
        # k has the component's parity, so a record says where it came from.
        k = np.clip(rng.poisson(mean, size=n), 2, length - 1)
        k = k - (k % 2) + parity
        ids = np.zeros((n, length), dtype=np.int32)
        for i, m in enumerate(k):
            ids[i, :m] = rng.integers(1, 50_000, size=m)
        path = os.path.join(root, name)
        tessera.write(path, {"tokens": ids, "n": k.astype(np.int64)})
        out[name] = (path, float(k.mean()))
    return out


def test_token_weights_give_token_shares(two_sets: Dict[str, Tuple[str, float]]) -> None:
    comps = {name: (path, 0.5) for name, (path, _) in two_sets.items()}
    by_tokens = tessera.mix(comps, seed=3, unit="tokens", tokens_field="tokens")
    per = by_tokens.tokens_per_sample
    assert per is not None
    for name, (_, mean) in two_sets.items():
        assert per[name] == pytest.approx(mean, rel=1e-12)
    got = delivered(by_tokens, 20_000)
    share = got["short"] / (got["short"] + got["long"])
    assert share == pytest.approx(0.5, abs=0.02), got
    # By samples, the same weights give equal sample counts, so the long
    # set delivers about 5x the tokens.
    by_samples = tessera.mix(comps, seed=3)
    got = delivered(by_samples, 20_000)
    ratio = got["long"] / got["short"]
    want = two_sets["long"][1] / two_sets["short"][1]
    assert ratio == pytest.approx(want, rel=0.1), got


def test_a_token_mixture_pickles_and_keeps_its_unit(two_sets: Dict[str, Tuple[str, float]]) -> None:
    import pickle

    comps = {name: (path, w) for (name, (path, _)), w in zip(two_sets.items(), (0.3, 0.7))}
    m = tessera.mix(comps, seed=5, unit="tokens", tokens_field="tokens", schedule=[(5000, {"short": 0.9})])
    m2 = pickle.loads(pickle.dumps(m))
    assert m2.unit == "tokens"
    assert [m.pick(i) for i in range(0, 10_000, 7)] == [m2.pick(i) for i in range(0, 10_000, 7)]


def test_token_unit_errors_name_the_component(two_sets: Dict[str, Tuple[str, float]]) -> None:
    comps = {name: (path, 0.5) for name, (path, _) in two_sets.items()}
    with pytest.raises(ArgumentError, match="tokens_field"):
        tessera.mix(comps, unit="tokens")
    with pytest.raises(ArgumentError, match="no field 'ids'"):
        tessera.mix(comps, unit="tokens", tokens_field="ids")
    with pytest.raises(ArgumentError, match="unit must be"):
        tessera.mix(comps, unit="bytes")
