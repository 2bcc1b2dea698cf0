"""The web UI in a real browser: Debian's chromium driven through
chromium-driver (WebDriver, selenium). Log in with a token, see the jobs,
open one, run it now and watch its log arrive while it runs, pause it with
a note, log out; a viewer has no operator buttons and the server refuses
its writes. Screenshots of each page (desktop and phone width) go to the
test's tmp dir; CRONRD_UI_SCREENSHOTS=DIR copies them there as well (.ci/run
keeps them under artifacts/screenshots; the ui-*.png of the pictures test are
the docs/ui-*.png of the README and docs/web-ui-and-api.md)."""

from __future__ import annotations

import datetime
import os
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest

from harness import wait_for

pytestmark = pytest.mark.integration

webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if not (CHROMIUM and DRIVER) and os.environ.get("CI"):
    pytest.fail("CI must have chromium and chromium-driver: .ci/run installs them",
                pytrace=False)
if not (CHROMIUM and DRIVER):
    pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium "
                "chromium-driver; .ci/run does)", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.common.exceptions import WebDriverException  # noqa: E402

SLOW = "for i in 1 2 3 4 5 6; do echo \"line $i\"; sleep 1; done"


@pytest.fixture
def browser(tmp_path):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--window-size=1280,900", "--hide-scrollbars",
                f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    driver.set_page_load_timeout(30)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    copy_to = os.environ.get("CRONRD_UI_SCREENSHOTS")

    def shot(name: str) -> Path:
        path = shots / f"{name}.png"
        # the whole page, not just the window
        driver.set_window_size(driver.get_window_size()["width"], 600)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        width = driver.execute_script("return window.innerWidth")
        driver.set_window_size(driver.get_window_size()["width"], max(600, min(height + 140,
                                                                                 4000)))
        driver.save_screenshot(str(path))
        if copy_to:
            Path(copy_to).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(copy_to) / path.name)
        assert width > 0
        return path
    driver.shot = shot
    try:
        yield driver
    finally:
        driver.quit()


def iso_plus(iso: str, seconds: float) -> str:
    """An ISO time ``seconds`` later, to the second (UTC)."""
    t = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (t + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def text_of(driver, element_id: str) -> str:
    """The text of the element with this id, "" while the page has none
    (a form's POST may still be loading the next page)."""
    try:
        return " ".join(e.text for e in driver.find_elements(By.ID, element_id))
    except WebDriverException:
        return ""


def log_in(driver, node, url: str, name: str, role: str) -> None:
    """A new token of ``role``, pasted on the login page: the overview."""
    secret = node.cli("token", "create", "--name", name, "--role", role).stdout.strip()
    driver.get(url + "/login")
    driver.find_element(By.NAME, "token").send_keys(secret)
    driver.find_element(By.ID, "login").click()
    wait_for(lambda: text_of(driver, "whoami") == f"{name} · {role}", what="the overview")


def no_sideways_scroll(driver) -> bool:
    """The page fits the window's width (tables scroll inside their box)."""
    return driver.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_an_operator_and_a_viewer_in_a_real_browser(node, browser):
    node.write_job("report", {"schedule": "@daily", "command": SLOW,
                              "description": "prints six lines, one a second"})
    node.write_job("cleanup", {"schedule": "*/15 * * * *", "command": "true"})
    node.write_job("publish", {"schedule": "@daily", "command": "true",
                               "depends_on": ["report"]})
    node.write_job("import-orders", {"schedule": "*/5 * * * *",
                                     "command": "echo 'orders.csv: no such file' >&2; exit 3"})
    node.start()
    url = node.call("status")["http"]
    failed = node.call("run_now", {"job": "import-orders"})["run_id"]
    wait_for(lambda: node.call("run", {"run_id": failed})["state"] == "failed",
             what="a failed run to show")
    ops = node.cli("token", "create", "--name", "alice", "--role", "operator").stdout.strip()
    viewer = node.cli("token", "create", "--name", "bob", "--role", "viewer").stdout.strip()
    b = browser

    # log in
    b.get(url + "/")
    assert b.current_url.startswith(url + "/login")
    b.shot("login")
    b.find_element(By.NAME, "token").send_keys(ops)
    b.find_element(By.ID, "login").click()
    wait_for(lambda: text_of(b, "whoami") == "alice · operator",
             what="the overview after login")
    assert "Overview" in b.title
    assert str(failed) in b.find_element(By.ID, "failures").text
    # the session cookie is not readable from the page's script
    assert b.execute_script("return document.cookie") == ""
    b.shot("overview")

    # see the jobs, open one
    b.find_element(By.LINK_TEXT, "Jobs").click()
    names = [a.text for a in b.find_elements(By.CSS_SELECTOR, "#jobs td:first-child a")]
    assert names == ["cleanup", "import-orders", "publish", "report"]
    b.shot("jobs")
    b.find_element(By.LINK_TEXT, "report").click()
    assert b.find_element(By.TAG_NAME, "h1").text.startswith("report")
    assert "jobs/report.yaml" in b.find_element(By.ID, "source").text
    b.shot("job")

    # run it now; its log arrives while it runs
    b.find_element(By.ID, "run-now").click()
    wait_for(lambda: "/runs/" in b.current_url, what="the run's page")
    run_page = b.current_url.removeprefix(url)
    wait_for(lambda: "line 1" in text_of(b, "log"), timeout=20, what="the first line, live")
    log = b.find_element(By.ID, "log")
    seen_early = log.text
    assert "line 6" not in seen_early  # it came while the run ran
    # (the page follows the run: its <main> may be swapped between a find
    # and a read, so read through text_of, which finds it again)
    wait_for(lambda: text_of(b, "run-state") in ("running", "assigned"), timeout=5,
             what="the run's state while it runs")
    b.shot("run-live")
    wait_for(lambda: "line 6" in log.text and text_of(b, "run-state") == "succeeded", timeout=30, what="the whole log and the run's end")
    assert [ln for ln in log.text.splitlines()] == [f"line {i}" for i in range(1, 7)]
    assert b.find_element(By.ID, "exit-code").text == "0"
    b.shot("run-done")

    # pause it with a note
    b.find_element(By.LINK_TEXT, "report").click()
    b.find_element(By.ID, "pause-note-input").send_keys("waiting for the new schema")
    b.find_element(By.ID, "pause").click()
    wait_for(lambda: "waiting for the new schema" in text_of(b, "pause-note"),
             what="the pause note")
    assert b.find_element(By.ID, "job-state").text == "paused"
    assert node.call("job", {"name": "report"})["pause"]["by"] == "token 'alice' (role operator)"
    b.shot("job-paused")

    # the other pages
    for page in ("runs", "graph", "alerts", "backfills", "nodes"):
        b.get(f"{url}/{page}")
        assert b.find_element(By.ID, "whoami")
        if page == "graph":  # report -> publish, drawn
            assert len(b.find_elements(By.CSS_SELECTOR, "svg.graph rect")) == 2
            assert len(b.find_elements(By.CSS_SELECTOR, "svg.graph path.edge")) == 1
            # a box says its schedule and latest state, in its state's colour
            # (issue 33 (2))
            assert b.find_elements(By.CSS_SELECTOR, 'a.graph-node[data-job="report"] rect.ok')
            details = {a.get_attribute("data-job"): a.find_element(By.CSS_SELECTOR,
                                                                   "text.detail").text
                       for a in b.find_elements(By.CSS_SELECTOR, "a.graph-node")}
            assert details["report"] == "@daily · succeeded", details
            assert details["publish"].startswith("@daily · "), details
        b.shot(page)

    # phone width: nothing scrolls sideways
    b.set_window_size(390, 844)
    for page, name in (("/", "overview"), ("/jobs", "jobs"), ("/jobs/report", "job"),
                       (run_page, "run"), ("/alerts", "alerts"), ("/graph", "graph")):
        b.get(url + page)
        assert no_sideways_scroll(b), page
        b.shot(f"phone-{name}")
    b.set_window_size(1280, 900)

    # log out
    b.find_element(By.ID, "logout").click()
    wait_for(lambda: "/login" in b.current_url, what="the login page")
    b.get(url + "/jobs")
    assert "/login" in b.current_url

    # a viewer: no operator buttons, and the server refuses the writes
    b.find_element(By.NAME, "token").send_keys(viewer)
    b.find_element(By.ID, "login").click()
    wait_for(lambda: text_of(b, "whoami") == "bob · viewer",
             what="the viewer's session")
    b.get(url + "/jobs/report")
    assert not b.find_elements(By.ID, "run-now") and not b.find_elements(By.ID, "resume")
    b.shot("viewer-job")
    statuses = b.execute_script("""
        const csrf = document.querySelector('input[name=csrf]').value;
        const post = (path) => fetch(path, {method: 'POST', credentials: 'same-origin',
            headers: {'Content-Type': 'application/x-www-form-urlencoded'},
            body: 'csrf=' + csrf}).then(r => r.status);
        return Promise.all([post('/jobs/report/resume'), post('/jobs/report/run'),
                            post('/jobs/cleanup/pause')]);""")
    assert statuses == [403, 403, 403]
    job = node.call("job", {"name": "report"})
    assert job["paused"] and job["pause"]["by"] == "token 'alice' (role operator)"
    assert not node.call("job", {"name": "cleanup"})["paused"]
    assert "event=http_handler_failed" not in node.daemon_log()


def test_pages_follow_the_cluster_without_a_reload(node, browser):
    """Issue 33 (1, 8): a run started from the CLI appears on an open
    overview and job page without a reload, and a run's page follows its run
    to the end (state, times, no Cancel button, attempts); its log streams
    over SSE. A mark set in the page's script survives: nothing reloaded."""
    node.write_job("report", {"schedule": "@daily", "command": SLOW})
    node.start()
    url = node.call("status")["http"]
    b = browser
    log_in(b, node, url, "alice", "operator")

    def following() -> bool:
        return bool(b.execute_script(
            "var m = document.querySelector('main'); return m && m.dataset.following"))

    def unreloaded() -> bool:
        return b.execute_script("return window.cronrdMark === 42") is True

    for page in ("/", "/jobs/report"):
        b.get(url + page)
        wait_for(following, what=f"{page} following the event stream")
        b.execute_script("window.cronrdMark = 42")
        started = node.call("run_now", {"job": "report"})["run_id"]
        wait_for(lambda: f"/runs/{started}" in b.page_source, timeout=15,
                 what=f"run {started} on {page} without a reload")
        assert unreloaded(), page
        b.shot("live-overview" if page == "/" else "live-job")
        wait_for(lambda: node.call("run", {"run_id": started})["state"] == "succeeded",
                 timeout=30, what="the run's end")

    started = node.call("run_now", {"job": "report"})["run_id"]
    b.get(f"{url}/runs/{started}")
    wait_for(following, what="the run's page following")
    b.execute_script("window.cronrdMark = 42")
    wait_for(lambda: "line 1" in text_of(b, "log"), timeout=20, what="the log, streamed")
    assert "line 6" not in text_of(b, "log") and b.find_elements(By.ID, "cancel")
    wait_for(lambda: text_of(b, "run-state") == "succeeded" and "line 6" in text_of(b, "log"),
             timeout=30, what="the run's end on its page")
    wait_for(lambda: not b.find_elements(By.ID, "cancel"), what="the Cancel button gone")
    assert unreloaded()
    assert [ln for ln in text_of(b, "log").splitlines()] == [f"line {i}" for i in range(1, 7)]
    page = b.find_element(By.TAG_NAME, "main").text
    assert "Finished" in page and "succeeded" in page
    b.shot("live-run")

    # Issue 33 (2): the job's charts, drawn in the browser (uPlot), a point
    # per fire time that ran: three here
    b.get(url + "/jobs/report")
    wait_for(lambda: b.find_elements(By.CSS_SELECTOR, "#job-chart-duration canvas")
             and b.find_elements(By.CSS_SELECTOR, "#job-chart-lateness canvas"),
             what="the job's charts drawn")
    for chart in ("job-chart-duration", "job-chart-lateness"):
        assert b.find_element(By.ID, chart).get_attribute("data-points") == "3"
    assert "succeeded" in b.find_element(By.ID, "job-chart-duration").text.lower()  # legend
    b.shot("job-charts")


def test_pictures_of_time_in_a_real_browser(node, browser):
    """Issue 33 (2, 8): the overview's activity charts drawn with data; the
    timeline shows a run on the node that ran it, its bar leads to the run,
    and a drag zooms to that stretch; the graph shows a failed generation
    in its failed colour; the job's calendar marks today. A screenshot of
    each page."""
    from selenium.webdriver.common.action_chains import ActionChains
    node.write_job("extract", {"schedule": "@yearly", "command": "echo x; sleep 1; exit 3"})
    node.write_job("load", {"schedule": "@after", "depends_on": [{"job": "extract"}],
                            "command": "true"})
    node.write_job("tick", {"schedule": "@every 2s", "command": "sleep 0.3"})
    node.start()
    failed = node.call("run_now", {"job": "extract"})["run_id"]
    wait_for(lambda: node.call("run", {"run_id": failed})["state"] == "failed",
             what="extract failed")
    wait_for(lambda: sum(r["state"] == "succeeded" for r in node.runs("tick")) >= 2,
             what="tick ran twice")
    # Quiet from here: the pages follow the cluster and swap their content on
    # each event, which would make an element found a moment ago stale.
    # (tick's schedule made yearly: no more fires, its runs stay)
    node.write_job("tick", {"schedule": "@yearly", "command": "sleep 0.3"})
    wait_for(lambda: node.call("job", {"name": "tick"})["schedule"] == "@yearly",
             what="tick's new schedule")
    wait_for(lambda: not node.runs(state="running") and not node.runs(state="assigned")
             and not node.runs(state="pending"), what="nothing running")
    me = node.call("run", {"run_id": failed})["node"]
    url = node.call("status")["http"]
    b = browser
    log_in(b, node, url, "eve", "viewer")

    wait_for(lambda: len(b.find_elements(By.CSS_SELECTOR, "div.chart[data-activity] canvas"))
             == 3, what="the overview's three charts drawn")
    chart = b.find_element(By.ID, "chart-running")
    assert chart.get_attribute("data-points") == "60"
    assert chart.get_attribute("data-series-count") == "1" and me in chart.text.lower()
    assert "failed" in b.find_element(By.ID, "chart-outcomes").text.lower()
    b.shot("ui-overview")

    run = node.call("run", {"run_id": failed})
    window = "/timeline?" + urlencode({"start": iso_plus(run["started_at"], -4),
                                       "end": iso_plus(run["finished_at"], 4)})
    b.get(url + window)
    bar = b.find_element(By.CSS_SELECTOR, f'svg#timeline a.bar[data-run="{failed}"]')
    assert bar.get_attribute("data-node") == me
    rect = bar.find_element(By.TAG_NAME, "rect")
    assert rect.get_attribute("class") == "bad"
    assert rect.value_of_css_property("fill") == "rgb(224, 96, 90)"
    assert b.find_elements(By.XPATH, f'//*[local-name()="text" and @class="node" '
                                     f'and text()="{me}"]')
    b.shot("ui-timeline")
    bar.click()
    wait_for(lambda: b.current_url.endswith(f"/runs/{failed}"), what="the bar's run page")
    b.get(url + window)
    svg = b.find_element(By.ID, "timeline")
    left, plot = int(svg.get_attribute("data-left")), int(svg.get_attribute("data-plot"))
    start, end = float(svg.get_attribute("data-start")), float(svg.get_attribute("data-end"))
    width = svg.size["width"]
    (ActionChains(b).move_to_element_with_offset(svg, -width // 2 + left + plot // 2, 5)
     .click_and_hold().move_by_offset(plot // 4, 0).release().perform())
    wait_for(lambda: "start=" in b.current_url and "end=" in b.current_url,
             what="the zoomed window")
    svg = b.find_element(By.ID, "timeline")
    span = float(svg.get_attribute("data-end")) - float(svg.get_attribute("data-start"))
    assert abs(span - (end - start) / 4) < 30, span

    b.get(url + "/graph")
    box = b.find_element(By.CSS_SELECTOR, 'a.graph-node[data-job="extract"]')
    assert box.get_attribute("data-state") == "failed"
    assert box.find_element(By.TAG_NAME, "rect").value_of_css_property("fill") == \
        "rgb(253, 232, 230)"
    # its child's run of that generation was skipped (its upstream failed)
    assert b.find_element(By.CSS_SELECTOR, 'a.graph-node[data-job="load"]').text.endswith(
        "@after · skipped")
    b.shot("ui-graph")

    b.get(url + "/jobs/tick")
    # (the calendar runs 28 days past today: today's cell by its date, the job's zone UTC)
    day = datetime.datetime.now(datetime.timezone.utc).date()
    today = b.find_element(By.CSS_SELECTOR, f'svg#calendar rect.day[data-day="{day}"]')
    assert "succeeded" in today.get_attribute("class").split()
    b.shot("ui-job")
    for page, name in (("/jobs", "jobs"), ("/runs", "runs"), (f"/runs/{failed}", "run"),
                       ("/alerts", "alerts"), ("/nodes", "nodes"), ("/backfills", "backfills")):
        b.get(url + page)
        assert b.find_elements(By.TAG_NAME, "main"), page
        b.shot(f"ui-{name}")
