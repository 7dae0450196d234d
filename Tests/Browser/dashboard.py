#!/usr/bin/env python3
"""The dashboard in a real browser: Debian's chromium, driven by Selenium through the system's
chromedriver (nothing is downloaded). Usage: dashboard.py URL WORKER_PID SCREENSHOT EXPECTED

Waits for the worker rows and their slot lights, for busy slots, then SIGKILLs WORKER_PID and
waits for its row to show "lost"; then for the completed count to reach the job's size (read from
the page's own feed). Saves a screenshot of the running scan (SCREENSHOT) and of the end
(SCREENSHOT with "-done"). Prints one JSON line with what it saw; exits 1 on a
timeout, naming what it waited for."""
import json
import os
import signal
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def main():
    url, worker_pid, screenshot, expected = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1300,900", f"--user-data-dir={tempfile.mkdtemp(prefix='skynet-chromium-')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    seen = {}
    try:
        driver.get(url)

        def wait(what, predicate, timeout=30):
            deadline = time.time() + timeout
            while time.time() < deadline:
                value = predicate()
                if value:
                    return value
                time.sleep(0.1)
            driver.save_screenshot(screenshot)
            sys.exit(f"dashboard: timed out waiting for {what}")

        rows = wait("two worker rows with 4 slot lights each", lambda: (
            lambda found: found if len(found) >= 2 and all(
                len(r.find_elements(By.CSS_SELECTOR, ".slot")) == 4 for r in found) else None)(
            driver.find_elements(By.CSS_SELECTOR, "tr.worker:not(.lost)")))
        seen["workers"] = sorted(r.get_attribute("data-worker") for r in rows)
        seen["busy_slots"] = wait("busy slots", lambda: len(driver.find_elements(By.CSS_SELECTOR, ".slot.busy")))
        seen["live"] = driver.find_element(By.ID, "connection").text
        time.sleep(2.5)  # a few seconds of history for the chart, then the picture of a running scan
        driver.save_screenshot(screenshot)
        os.kill(worker_pid, signal.SIGKILL)
        lost = wait("a lost worker row", lambda: driver.find_elements(By.CSS_SELECTOR, "tr.worker.lost"), timeout=20)
        seen["lost"] = [r.get_attribute("data-worker") for r in lost]
        seen["done_cells"] = wait("a worker's own figures (done)", lambda: [
            c.text for c in driver.find_elements(By.CSS_SELECTOR, "tr.worker:not(.lost) td.done") if c.text not in ("", "–")])
        seen["completed"] = wait(f"{expected} completed", lambda: (
            lambda n: n if n >= expected else None)(
            int(driver.find_element(By.ID, "completed").text.replace(",", "") or "0")), timeout=60)
        seen["scheduled"] = int(driver.find_element(By.ID, "scheduled").text.replace(",", ""))
        driver.save_screenshot(screenshot.replace(".png", "-done.png"))
        print(json.dumps(seen))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
