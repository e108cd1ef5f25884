"""The chat page at `/` in headless Chromium (Debian's chromium + chromium-driver via Selenium):
it loads, streams a reply and shows its TTFT and tokens/s; renders markdown as elements and
never model text as HTML; sends the system prompt; drops the oldest turns when the
conversation outgrows the context; shows an error that arrives mid-stream and recovers."""
import contextlib
import shutil
import time

import pytest

from server_util import Server

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(not (CHROMEDRIVER and CHROMIUM),
                                reason="needs Debian's chromium and chromium-driver")

# Records every request body the page sends, so a test can read what went to the server.
RECORD_FETCH = """
window.sentBodies = [];
const realFetch = window.fetch;
window.fetch = (url, init) => {
  if (init && init.body) window.sentBodies.push(JSON.parse(init.body));
  return realFetch(url, init);
};
"""


@contextlib.contextmanager
def page(server):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]:
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.get(server.url + "/")
        yield driver
    finally:
        driver.quit()


def by(kind):
    from selenium.webdriver.common.by import By
    return getattr(By, kind)


def wait(driver, cond, seconds=90):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    # An element found while the page redraws a streaming reply can be replaced before it is
    # read; the condition is simply tried again.
    return WebDriverWait(driver, seconds,
                         ignored_exceptions=[StaleElementReferenceException]).until(cond)


def finished_replies(driver):
    return [e for e in driver.find_elements(by("CSS_SELECTOR"), ".msg.assistant .stats")
            if "tok/s" in e.text]


def send(driver, text):
    wait(driver, lambda d: d.find_element(by("ID"), "send").is_enabled())
    before = len(finished_replies(driver))
    driver.find_element(by("ID"), "input").send_keys(text)
    driver.find_element(by("ID"), "send").click()
    wait(driver, lambda d: len(finished_replies(d)) > before)


def test_chat_page_streams_a_reply(model_path):
    s = Server(api_key="page-key")
    try:
        with page(s) as driver:
            # With --api-key the page asks for the key before anything else works.
            wait(driver, lambda d: d.find_element(by("ID"), "keybox").is_displayed(), 60)
            driver.find_element(by("ID"), "apikey").send_keys("page-key")
            driver.find_element(by("ID"), "savekey").click()
            wait(driver, lambda d: d.find_element(by("ID"), "model").text.startswith("SmolLM2"))
            driver.find_element(by("ID"), "max_tokens").clear()
            driver.find_element(by("ID"), "max_tokens").send_keys("12")
            send(driver, "Say hello in one word.")
            stats = finished_replies(driver)[0].text
            assert "TTFT" in stats and "tokens" in stats
            content = driver.find_element(by("CSS_SELECTOR"), ".msg.assistant .content").text
            assert content.strip()
            assert not driver.find_elements(by("CSS_SELECTOR"), ".msg.assistant.error")
    finally:
        s.stop()


MARKDOWN = """# Title with **bold**

Some `inline <b>code</b>` and *emphasis*, snake_case_name and 2 * 3 * 4.
A second line of the same paragraph <img src=x onerror="window.pwned=1">.

- first item
- second with [a link](https://example.com/x) and [bad](javascript:window.pwned=2)

3. three
4. four

> quoted **text**

```python
def f(x):
    return "<script>window.pwned=3</script>"
```

<script>window.pwned = 4</script>
```
an unterminated fence, as while streaming"""


def test_markdown_becomes_elements_and_model_text_never_html(model_path):
    s = Server()
    try:
        with page(s) as driver:
            out = driver.execute_script(
                """const root = renderMarkdown(arguments[0]);
                document.body.appendChild(root);
                const q = (sel) => Array.from(root.querySelectorAll(sel));
                return {
                  h1: q("h1").map((e) => e.textContent), h1strong: q("h1 strong").length,
                  code: q("p code").map((e) => e.textContent), em: q("p em").map((e) => e.textContent),
                  p: q("p").map((e) => e.textContent), br: q("p br").length,
                  ul: q("ul > li").map((e) => e.textContent), ol: q("ol > li").map((e) => e.textContent),
                  olStart: q("ol").map((e) => e.start),
                  links: q("a").map((e) => [e.getAttribute("href"), e.rel, e.textContent]),
                  quote: q("blockquote strong").map((e) => e.textContent),
                  pre: q("pre > code").map((e) => [e.className, e.textContent]),
                  injected: q("img, script, b").length, pwned: window.pwned || 0,
                };""", MARKDOWN)
            assert out["h1"] == ["Title with bold"] and out["h1strong"] == 1
            assert out["code"] == ["inline <b>code</b>"]
            assert out["em"] == ["emphasis"]  # neither snake_case nor 2 * 3 * 4
            assert "snake_case_name and 2 * 3 * 4." in out["p"][0] and out["br"] >= 1
            assert '<img src=x onerror="window.pwned=1">' in out["p"][0]
            assert out["ul"][0] == "first item" and out["ul"][1].startswith("second with a link")
            assert "[bad](javascript:window.pwned=2)" in out["ul"][1]
            assert out["links"] == [["https://example.com/x", "noopener noreferrer", "a link"]]
            assert out["ol"] == ["three", "four"] and out["olStart"] == [3]
            assert out["quote"] == ["text"]
            assert out["pre"][0] == ["language-python",
                                     'def f(x):\n    return "<script>window.pwned=3</script>"']
            assert out["pre"][1] == ["", "an unterminated fence, as while streaming"]
            assert out["injected"] == 0 and out["pwned"] == 0
            assert any("<script>window.pwned = 4</script>" in p for p in out["p"])
    finally:
        s.stop()


def test_system_prompt_and_a_conversation_longer_than_the_context(model_path):
    # 192 tokens of context: a few turns fill it, and the page must keep answering.
    s = Server("--ctx", "192")
    try:
        with page(s) as driver:
            driver.execute_script(RECORD_FETCH)
            wait(driver, lambda d: d.find_element(by("ID"), "model").text.startswith("SmolLM2"))
            driver.find_element(by("ID"), "system_toggle").click()
            driver.find_element(by("ID"), "system_prompt").send_keys("You are a terse assistant.")
            driver.find_element(by("ID"), "max_tokens").clear()
            driver.find_element(by("ID"), "max_tokens").send_keys("40")
            questions = ["Describe the city of Paris, its history and its river.",
                         "Now describe London, its bridges and its parks.",
                         "And Rome, with its hills and its ancient ruins?",
                         "What is the capital of Germany?"]
            for q in questions:
                send(driver, q)
            errors = driver.find_elements(by("CSS_SELECTOR"), ".msg.error")
            assert not errors, [e.text for e in errors]
            assert len(finished_replies(driver)) == len(questions)
            notices = [e.text for e in driver.find_elements(by("CSS_SELECTOR"), ".msg.notice")]
            assert notices and all("oldest message" in n and "192 tokens" in n for n in notices)
            bodies = [b for b in driver.execute_script("return window.sentBodies")
                      if "messages" in b]
            # Every request opens with the system prompt; the last one no longer carries the
            # first question, and ends with the question asked.
            assert all(b["messages"][0] == {"role": "system",
                                            "content": "You are a terse assistant."}
                       for b in bodies)
            last = bodies[-1]["messages"]
            assert last[-1] == {"role": "user", "content": questions[-1]}
            assert all(m["content"] != questions[0] for m in last)
            # The server saw a request refused as too long (that is what made the page trim).
            assert len(bodies) > len(questions)
            # A max_tokens no trimming can make room for: the error is shown and the turns
            # tried away are put back, so the next request still carries them.
            kept = [m["content"] for m in last]
            driver.find_element(by("ID"), "max_tokens").clear()
            driver.find_element(by("ID"), "max_tokens").send_keys("100000")
            send(driver, "One more?")
            assert "context" in driver.find_elements(
                by("CSS_SELECTOR"), ".msg.assistant.error")[-1].text
            driver.find_element(by("ID"), "max_tokens").clear()
            driver.find_element(by("ID"), "max_tokens").send_keys("8")
            send(driver, "Thanks.")
            again = [m["content"] for m in
                     driver.execute_script("return window.sentBodies")[-1]["messages"]]
            assert again[-1] == "Thanks." and "One more?" not in again
            assert kept[-1] in again  # the question before is still there
    finally:
        s.stop()


# A stream that gives some text, then an error event, as ferry sends when generation fails
# after the response began; and a 500 that gives nothing.
FAILING_FETCH = """
window.realFetch = window.realFetch || window.fetch;
window.fetch = async (url, init) => {
  if (!String(url).includes("/chat/completions")) return window.realFetch(url, init);
  if (arguments[0] === "stream") {
    const enc = new TextEncoder();
    const body = new ReadableStream({ start(c) {
      c.enqueue(enc.encode('data: {"choices":[{"index":0,"delta":{"content":"Partial **answer**"}}]}\\n\\n'));
      c.enqueue(enc.encode('data: {"error":{"message":"the engine failed: injected","type":"internal_error"}}\\n\\n'));
      c.enqueue(enc.encode('data: [DONE]\\n\\n'));
      c.close();
    }});
    return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
  }
  return new Response(JSON.stringify({ error: { message: "injected 500", type: "internal_error" } }),
                      { status: 500, headers: { "Content-Type": "application/json" } });
};
"""


# A stream that gives a piece every 100 ms for 10 s, and stops when the page aborts it.
SLOW_FETCH = """
window.fetch = async (url, init) => {
  if (!String(url).includes("/chat/completions")) return window.realFetch(url, init);
  const enc = new TextEncoder();
  let timer = null;
  const body = new ReadableStream({
    start(c) {
      let i = 0;
      timer = setInterval(() => {
        if (i++ === 100) { clearInterval(timer); c.enqueue(enc.encode("data: [DONE]\\n\\n")); c.close(); return; }
        c.enqueue(enc.encode('data: {"choices":[{"index":0,"delta":{"content":"once "}}]}\\n\\n'));
      }, 100);
      init.signal.addEventListener("abort", () => { clearInterval(timer); c.error(new DOMException("stopped", "AbortError")); });
    },
  });
  return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
};
"""


# Counts changes to a reply's content made after its stats line was written.
COUNT_LATE_DRAWS = """
window.lateDraws = 0;
const finished = new WeakSet();
new MutationObserver((records) => {
  // Records arrive in the order the changes were made, after the script that made them.
  for (const r of records) {
    const bubble = r.target.closest && r.target.closest(".msg.assistant");
    if (!bubble) continue;
    if (r.target.closest(".stats")) finished.add(bubble);
    else if (r.target.closest(".content") && finished.has(bubble)) window.lateDraws++;
  }
}).observe(document.getElementById("log"), { childList: true, subtree: true });
"""


def test_errors_are_shown_and_the_conversation_goes_on(model_path):
    s = Server()
    try:
        with page(s) as driver:
            wait(driver, lambda d: d.find_element(by("ID"), "model").text.startswith("SmolLM2"))
            driver.find_element(by("ID"), "max_tokens").clear()
            driver.find_element(by("ID"), "max_tokens").send_keys("8")
            driver.execute_script(FAILING_FETCH, "stream")
            driver.execute_script(COUNT_LATE_DRAWS)
            send(driver, "first")
            bubble = driver.find_element(by("CSS_SELECTOR"), ".msg.assistant.error")
            assert "the engine failed: injected" in bubble.text
            assert bubble.find_element(by("CSS_SELECTOR"), ".content strong").text == "answer"
            # A finished reply is not redrawn by a timer left from its stream (its elements
            # would be replaced under whoever holds them).
            time.sleep(0.2)
            assert driver.execute_script("return window.lateDraws") == 0
            driver.execute_script(FAILING_FETCH, "500")
            send(driver, "second")
            assert "injected 500" in driver.find_elements(
                by("CSS_SELECTOR"), ".msg.assistant.error")[-1].text
            # The real server again: the failed exchange with no reply is not sent, the one
            # with a partial reply is.
            driver.execute_script(RECORD_FETCH.replace("window.fetch;", "window.realFetch;"))
            send(driver, "Say hello.")
            bodies = driver.execute_script("return window.sentBodies")
            msgs = [m["content"] for m in bodies[-1]["messages"]]
            assert msgs == ["first", "Partial **answer**", "Say hello."], msgs
            assert not driver.find_elements(by("CSS_SELECTOR"),
                                            ".msg.assistant.error:last-of-type .error-text")
            assert "tok/s" in finished_replies(driver)[-1].text
            # New chat while a reply streams (a slow stream, 100 ms a piece): the old reply does
            # not follow into the new conversation.
            driver.execute_script(SLOW_FETCH)
            n = len(driver.find_elements(by("CSS_SELECTOR"), ".msg.assistant"))
            driver.find_element(by("ID"), "input").send_keys("Tell me a long story.")
            driver.find_element(by("ID"), "send").click()
            wait(driver, lambda d: len(d.find_elements(by("CSS_SELECTOR"), ".msg.assistant")) > n
                 and d.find_elements(by("CSS_SELECTOR"), ".msg.assistant .content")[-1]
                 .text.strip())
            assert driver.find_element(by("ID"), "stop").is_enabled()  # still streaming
            driver.find_element(by("ID"), "clear").click()
            driver.execute_script(RECORD_FETCH.replace("window.fetch;", "window.realFetch;"))
            send(driver, "Say hi.")
            msgs = [m["content"] for m in driver.execute_script("return window.sentBodies")[-1]
                    ["messages"]]
            assert msgs == ["Say hi."], msgs
    finally:
        s.stop()
