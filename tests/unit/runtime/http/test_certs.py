"""Client-certificate roles (cronrd/runtime/http/certs.py)."""

from cronrd.runtime.http.certs import names_of, principal

CERT = {"subject": ((("organizationName", "ops"),), (("commonName", "grafana"),)),
        "subjectAltName": (("DNS", "grafana.example"), ("IP Address", "10.0.0.5"))}
ROLES = (("deployer", "operator", "etl-*"), ("grafana.example", "viewer", ""))


def test_the_names_are_the_subject_cn_then_the_dns_alt_names():
    assert names_of(CERT) == ["grafana", "grafana.example"]
    assert names_of(None) == [] and names_of({}) == []


def test_a_listed_name_gets_its_role_and_an_unlisted_one_nothing():
    assert principal(CERT, ROLES) == {"name": "cert:grafana.example", "role": "viewer",
                                      "jobs": "", "expires_at": None, "created_at": None,
                                      "node": None}
    other = {"subject": ((("commonName", "mallory"),),)}
    assert principal(other, ROLES) is None
    assert principal(CERT, ()) is None       # no roles: a certificate grants nothing
    assert principal(None, ROLES) is None    # no certificate presented
    assert principal({"subject": ((("commonName", "deployer"),),)}, ROLES)["jobs"] == "etl-*"
