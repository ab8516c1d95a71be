"""``report`` in money: the allocation and each badput part at the partitions' prices."""

from __future__ import annotations

import pytest

from hpcjobs.config.loader import load_site
from hpcjobs.report.build import ChainReport, chain_report
from hpcjobs.report.goodput import BADPUT_PARTS, PARTS
from hpcjobs.report.money import Rate, site_rates
from hpcjobs.report.text import report_text
from tests.unit.test_report import _utc, recorded

__all__ = ["_utc"]  # the recorded times are UTC: the same autouse fixture


def report(rates: dict[str, Rate]) -> ChainReport:
    usage, chain, progress = recorded()
    return chain_report("10", usage, chain, progress, rates=rates)


def test_an_interrupted_chains_badput_costs_its_gpu_hours_at_the_sites_price() -> None:
    # The recorded chain: preempted once, on the sandbox's 'batch' partition (2.00 USD/GPU-h).
    rates = site_rates(load_site("sandbox"))
    assert rates["batch"] == Rate("USD", 2.0, None)
    chain = report(rates)
    cost = chain.cost()
    assert cost is not None and cost["currency"] == "USD"
    assert len(chain.interruptions) == 1 and chain.has_progress
    badput_gpu_hours = sum(chain.part_s(p) or 0.0 for p in BADPUT_PARTS) / 3600
    assert badput_gpu_hours > 0
    assert cost["badput"] == pytest.approx(badput_gpu_hours * 2.0)
    assert cost["allocated"] == pytest.approx(chain.allocated_gpu_hours * 2.0)
    assert sum(cost["parts"].values()) == pytest.approx(cost["allocated"])
    for part in PARTS:
        assert cost["parts"][part] == pytest.approx((chain.part_s(part) or 0.0) / 3600 * 2.0)
    data = chain.to_dict()
    assert data["cost"] == cost and data["runs"][0]["partition"] == "batch"
    text = report_text(chain)
    assert "Cost: 0.0144 USD allocated, of which badput 0.0014 USD" in text and "COST USD" in text


def test_no_price_no_cost_and_a_note_that_says_why() -> None:
    assert report({}).cost() is None and "cost" not in " ".join(report({}).to_dict()["notes"])
    other = report({"urgent": Rate("USD", 3.0, None)})
    assert other.cost() is None
    assert other.cost_note() == "no cost: run 10 ran on partition 'batch', which has no price"
    assert other.cost_note() in report_text(other)


def test_a_run_without_gpus_costs_its_node_hours() -> None:
    usage, chain, progress = recorded()
    for row in usage:
        row.alloc_tres.pop("gres/gpu", None)
        row.req_tres.pop("gres/gpu", None)
    plain = chain_report("10", usage, chain, progress, rates={"batch": Rate("EUR", None, 0.9)})
    cost = plain.cost()
    assert cost is not None and cost["currency"] == "EUR"
    node_hours = sum(run.elapsed_s * run.nodes for run in plain.runs) / 3600
    assert cost["allocated"] == pytest.approx(node_hours * 0.9)


def test_before_after_rows_carry_cost_and_a_direction() -> None:
    from hpcjobs.report.compare import compare_reports, compare_text
    from hpcjobs.report.html import report_page

    cheap = report({"batch": Rate("USD", 2000.0, None)})  # the recorded chain is short
    dear = report({"batch": Rate("USD", 3000.0, None)})
    data = compare_reports(cheap, dear, [])
    rows = {row["what"]: row for row in data["rows"]}
    assert rows["cost allocated (USD)"]["direction"] == "worse"
    assert rows["cost of badput (USD)"]["direction"] == "worse"
    assert rows["goodput (%)"]["direction"] == "same"
    back = {row["what"]: row for row in compare_reports(dear, cheap, [])["rows"]}
    assert back["cost allocated (USD)"]["direction"] == "better"
    assert "DIRECTION" in compare_text(data)
    page = report_page([cheap, dear], comparison=data)
    assert '<td class="worse">' in page and "cost: " in page
