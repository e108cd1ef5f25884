"""The chat page at `/` in headless Chromium (Debian's chromium + chromium-driver via Selenium):
it loads, sends a message, streams a reply and shows its TTFT and tokens/s."""
import shutil

import pytest

from server_util import Server

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(not (CHROMEDRIVER and CHROMIUM),
                                reason="needs Debian's chromium and chromium-driver")


def test_chat_page_streams_a_reply(model_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    s = Server(api_key="page-key")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]:
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.get(s.url + "/")
        wait = WebDriverWait(driver, 60)
        # With --api-key the page asks for the key before anything else works.
        wait.until(lambda d: d.find_element(By.ID, "keybox").is_displayed())
        driver.find_element(By.ID, "apikey").send_keys("page-key")
        driver.find_element(By.ID, "savekey").click()
        wait.until(lambda d: d.find_element(By.ID, "model").text.startswith("SmolLM2"))
        driver.find_element(By.ID, "max_tokens").clear()
        driver.find_element(By.ID, "max_tokens").send_keys("12")
        driver.find_element(By.ID, "input").send_keys("Say hello in one word.")
        driver.find_element(By.ID, "send").click()
        reply = wait.until(lambda d: [e for e in d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")
                                      if "tok/s" in e.text])
        stats = reply[0].text
        assert "TTFT" in stats and "tokens" in stats
        content = driver.find_element(By.CSS_SELECTOR, ".msg.assistant .content").text
        assert content.strip()
        assert not driver.find_elements(By.CSS_SELECTOR, ".msg.assistant.error")
    finally:
        driver.quit()
        s.stop()
