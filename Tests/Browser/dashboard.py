#!/usr/bin/env python3
"""The dashboard in a real browser: Debian's chromium, driven by Selenium through the system's
chromedriver (nothing is downloaded). Usage: dashboard.py URL WORKER_PID SCREENSHOT EXPECTED

Waits for the worker rows (with their host) and their slot lights, for busy slots and the running
job's row, then SIGKILLs WORKER_PID and waits for its row to show "lost"; then for the job's progress
bar to reach 100% with EXPECTED tasks, and reads its counts, its dead letters and the kind's row.
Saves a screenshot of the running scan (SCREENSHOT) and of the end (SCREENSHOT with "-done").
Prints one JSON line with what it saw; exits 1 on a timeout, naming what it waited for."""
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
                 "--window-size=1300,1150", f"--user-data-dir={tempfile.mkdtemp(prefix='skynet-chromium-')}"]:
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
        seen["hosts"] = sorted({c.text for c in driver.find_elements(By.CSS_SELECTOR, "tr.worker td.host")})
        running = wait("the running job's row", lambda: driver.find_elements(By.CSS_SELECTOR, "tr.job[data-state=running]"))
        seen["running_progress"] = running[0].find_element(By.CSS_SELECTOR, ".progress").text
        time.sleep(2.5)  # a few seconds of history for the chart, then the picture of a running scan
        driver.save_screenshot(screenshot)
        os.kill(worker_pid, signal.SIGKILL)
        lost = wait("a lost worker row", lambda: driver.find_elements(By.CSS_SELECTOR, "tr.worker.lost"), timeout=20)
        seen["lost"] = [r.get_attribute("data-worker") for r in lost]
        seen["done_cells"] = wait("a worker's own figures (done)", lambda: [
            c.text for c in driver.find_elements(By.CSS_SELECTOR, "tr.worker:not(.lost) td.done") if c.text not in ("", "–")])
        # Read in one script: the page redraws its rows every second, so elements found in one call
        # may be gone by the next.
        read_jobs = """
            const text = (row, sel) => { const e = row.querySelector(sel); return e ? e.textContent : ""; };
            return [...document.querySelectorAll("tr.job")].map((row) => ({
                name: row.cells[0].textContent, state: row.dataset.state,
                progress: text(row, ".progress"), tasks: row.cells[3].textContent,
                completed: text(row, "td.completed"), failed: text(row, "td.failed")}));"""

        def finished():
            return next((j for j in driver.execute_script(read_jobs) if j["progress"] == "100%"), None)

        job = wait("the job's progress at 100%", finished, timeout=90)
        number = lambda text: int(text.replace(",", "").rstrip("%") or "0")
        seen["job"] = {"name": job["name"], "state": job["state"], "progress": number(job["progress"]),
                       "tasks": number(job["tasks"]), "completed": number(job["completed"]),
                       "failed": number(job["failed"])}
        seen["dead_letters"] = driver.execute_script(
            "return [...document.querySelectorAll('tr.dead')].map((r) => r.textContent);")
        seen["kind"] = driver.execute_script(
            "return [...document.querySelectorAll('#kinds tr[data-kind=sector] td')].map((c) => c.textContent);")
        seen["completed"] = int(driver.find_element(By.ID, "completed").text.replace(",", "") or "0")
        seen["scheduled"] = int(driver.find_element(By.ID, "scheduled").text.replace(",", ""))
        driver.save_screenshot(screenshot.replace(".png", "-done.png"))
        print(json.dumps(seen))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
