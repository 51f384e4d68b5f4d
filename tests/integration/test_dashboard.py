"""The live dashboard in headless Chromium: it shows the model and a non-zero request rate."""

from __future__ import annotations

import shutil
import threading
import time

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import ARTIFACTS, DEFAULT_MODEL, api_without_triton

pytestmark = pytest.mark.integration

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)


@pytest.fixture
def browser(tmp_path):
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.fail("chromium and chromedriver are needed: `make test` installs them")
    options = Options()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def traffic(server):
    """Steady /infer requests for as long as the test runs."""
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while not stop.is_set():
                http.post("/infer", json={"model_name": DEFAULT_MODEL, "text": ["dashboards"] * 4})
                http.post("/infer", json={"model_name": DEFAULT_MODEL, "text": []})

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)


def number(driver, element_id: str) -> float | None:
    try:
        return float(driver.find_element(By.ID, element_id).text)
    except ValueError:
        return None


def test_page_is_self_contained(client):
    response = client.get("/dashboard")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "http://" not in response.text and "https://" not in response.text
    assert "<script src" not in response.text and "<link" not in response.text


def test_dashboard_shows_models_and_live_request_rate(server, browser, traffic):
    browser.get(server.url + "/dashboard")
    wait = WebDriverWait(browser, 60, poll_frequency=0.5)
    wait.until(lambda d: DEFAULT_MODEL in d.find_element(By.ID, "models").text)
    wait.until(lambda d: (number(d, "rps") or 0) > 0)
    wait.until(lambda d: number(d, "p50") is not None and number(d, "queue-ms") is not None)
    wait.until(lambda d: (number(d, "refusals") or 0) > 0)
    assert "batch" in browser.find_element(By.ID, "batches").text
    assert "bad_request" in browser.find_element(By.ID, "refusal-reasons").text
    time.sleep(8)  # a few more polls, so the screenshot's charts have a line to show
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "dashboard.png"))
    names = [e.text for e in browser.find_elements(By.CLASS_NAME, "model-name")]
    assert DEFAULT_MODEL in names


def test_the_dashboard_sends_the_api_key_it_is_given(browser, tmp_path):
    """With EMBED_API_KEY_INFER its data needs the key: the page says so, then sends the
    key typed into it (only the API runs here; the data answers without Triton)."""
    settings = {"EMBED_API_KEY": "dashboard-key", "EMBED_API_KEY_INFER": "true"}
    with api_without_triton(tmp_path / "repository", **settings) as url:
        browser.get(url + "/dashboard")
        wait = WebDriverWait(browser, 30, poll_frequency=0.3)
        wait.until(lambda d: "API key" in d.find_element(By.ID, "status").text)
        browser.find_element(By.ID, "key").send_keys("dashboard-key", Keys.TAB)
        wait.until(lambda d: "updated" in d.find_element(By.ID, "status").text)
