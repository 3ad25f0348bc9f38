"""Checks a live krabka-authority service through the Python client that
openapi-python-client generated from openapi/openapi.yaml: a single and a
batch check, each with an authoritative token, a superseded one and a
malformed one (400). Run by tests/broker/clients/python.rs.

usage: contract_check.py URL ROLE AUTHORITATIVE SUPERSEDED
(the generated package must be importable: PYTHONPATH)
"""

import sys

from krabka_authority_client import Client
from krabka_authority_client.api.authority import check_authority, check_authority_batch
from krabka_authority_client.models import (
    BatchProblem,
    BatchResponse,
    BatchVerdict,
    CheckAuthorityResponse200,
    CheckAuthorityInvalidProblem,
    CheckAuthorityResponse409,
    CheckItem,
)


def value(x):
    """An enum member's value, or the plain value."""
    return getattr(x, "value", x)


def expect(what, condition, got):
    if not condition:
        raise SystemExit(f"FAILED {what}: {got!r}")
    print(f"ok {what}")


def main():
    url, role, good, old = sys.argv[1:5]
    client = Client(base_url=url, raise_on_unexpected_status=True)

    r = check_authority.sync_detailed(role, client=client, token=good)
    p = r.parsed
    expect("single authoritative is a typed 200", r.status_code == 200 and isinstance(p, CheckAuthorityResponse200), (r.status_code, p))
    expect("its verdict, token, current pair and cluster", (value(p.verdict), p.token, p.current, p.role, p.cached) == ("authoritative", good, good, role, False) and p.cluster, p)

    r = check_authority.sync_detailed(role, client=client, token=old)
    p = r.parsed
    expect("single superseded is a typed 409", r.status_code == 409 and isinstance(p, CheckAuthorityResponse409), (r.status_code, p))
    expect("it names the current pair, which superseded the token", (value(p.verdict), p.token, p.current, p.superseded_by.pair) == ("superseded", old, good, good), p)

    r = check_authority.sync_detailed(role, client=client, token="1:-1")
    p = r.parsed
    expect("single malformed token is a typed 400", r.status_code == 400 and isinstance(p, CheckAuthorityInvalidProblem), (r.status_code, p))
    expect("the problem names the field", (p.field, value(p.status)) == ("token", 400) and p.detail, p)

    items = [CheckItem(role=role, token=good), CheckItem(role=role, token=old), CheckItem(role=role, token="nope")]
    r = check_authority_batch.sync_detailed(client=client, body=items)
    p = r.parsed
    expect("batch is a typed 200", r.status_code == 200 and isinstance(p, BatchResponse) and len(p.results) == 3, (r.status_code, p))
    first, second, third = p.results
    expect("batch item 1 authoritative", isinstance(first, BatchVerdict) and (value(first.status), value(first.verdict), first.current) == (200, "authoritative", good), first)
    # Answered from the service's cache by now: no current pair, the pair that superseded it.
    expect("batch item 2 superseded", isinstance(second, BatchVerdict) and (value(second.status), value(second.verdict), second.superseded_by.pair) == (409, "superseded", good), second)
    expect("batch item 3 a 400 problem", isinstance(third, BatchProblem) and (value(third.status), third.problem.field, third.token) == (400, "token", "nope"), third)


if __name__ == "__main__":
    main()
