"""The docs site, built from the notebooks without Quarto, read in a real browser.

`tools/build_docs.py` builds the site; headless Chromium (Debian's `chromium`, driven by Playwright
for Python), with no network but the local file server, loads every page and checks its title, its
API entries, its figures, its table of contents (every link hits an anchor of the page), that the
sidebar stays in view when scrolled to the bottom, that code is highlighted, that no signature shows
Markdown literally, that the first code cell is whole Python, that the console stays free of errors,
and that no internal link is broken; then that the search finds a page by a word only that page
holds and goes there. Where Chromium or Playwright is missing the test skips with one line saying which."""
import functools, http.server, json, shutil, subprocess, sys, threading, urllib.parse
from pathlib import Path
import pytest, yaml
from conftest import ROOT

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync']

@pytest.fixture(scope='module')
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp('site')
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'build_docs.py'), '--out', str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return out

@pytest.fixture(scope='module')
def server(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
    handler = functools.partial(Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True); t.start()
    yield f'http://127.0.0.1:{httpd.server_address[1]}/'
    httpd.shutdown()

def pages():
    side = yaml.safe_load((ROOT/'nbs'/'sidebar.yml').read_text())['website']['sidebar']['contents']
    return side

def test_site_has_a_page_per_sidebar_entry(site):
    html = sorted(p.name for p in site.glob('*.html'))
    assert len(html) == len(pages()), html
    assert 'index.html' in html

@pytest.fixture(scope='module')
def browser():
    if not CHROMIUM: pytest.skip('no Chromium here (Debian package `chromium`): the browser test of the docs site is skipped')
    pw = pytest.importorskip('playwright.sync_api', reason='Playwright for Python is not installed: browser test skipped')
    with pw.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()

def test_every_page_in_a_browser(site, server, browser):
    problems, seen = [], {}
    page = browser.new_page()
    errors = []
    def console(m):  # resources of other sites (the Colab badge image) cannot load on a machine without internet
        if m.type == 'error' and urllib.parse.urlparse(m.location.get('url') or server).netloc == urllib.parse.urlparse(server).netloc:
            errors.append(f'{page.url}: {m.text}')
    page.on('console', console)
    page.on('pageerror', lambda e: errors.append(f'{page.url}: {e}'))
    for f in sorted(site.glob('*.html')):
        resp = page.goto(server + f.name)
        assert resp.ok, f.name
        title = page.locator('h1.title').inner_text().strip()
        if not title: problems.append(f'{f.name}: no title')
        if f.name not in ('index.html', 'results.html', 'qlora.html') and page.locator('main h3').count() == 0:  # qlora: a walkthrough that defines nothing
            problems.append(f'{f.name}: no API entries (show_doc output)')
        broken_imgs = page.evaluate("[...document.images].filter(i => (i.src.startsWith('data:') || i.src.startsWith(location.origin))"
                                    " && (!i.complete || i.naturalWidth === 0)).length")
        if broken_imgs: problems.append(f'{f.name}: {broken_imgs} images that did not load')
        toc = page.evaluate("[...document.querySelectorAll('#TOC a[href]')].map(a => a.getAttribute('href'))")
        if not toc: problems.append(f'{f.name}: no table of contents')
        for href in toc:
            if not href.startswith('#') or not page.evaluate('id => !!document.getElementById(id)', urllib.parse.unquote(href[1:])):
                problems.append(f'{f.name}: TOC link {href} hits no anchor of the page')
        codes = page.evaluate("[...document.querySelectorAll('main pre')].map(p => ({text: p.innerText, spans: p.querySelectorAll('span[class]').length}))")
        if codes and not any(c['spans'] for c in codes): problems.append(f'{f.name}: code blocks without highlighting spans')
        literal = [c['text'] for c in codes if '`](' in c['text'] or '# from [' in c['text']]
        if literal: problems.append(f'{f.name}: {len(literal)} code blocks show Markdown links literally: {literal[0][:200]!r}')
        if '`](' in page.locator('main').inner_text(): problems.append(f'{f.name}: a Markdown link shown literally')
        if "find_spec('colab_t4_nb')" in page.content(): problems.append(f'{f.name}: the install cell is on the page')
        first = page.evaluate("(document.querySelector('main pre.cell-code') || {}).innerText")
        if first:
            try: compile(first, f.name, 'exec')
            except SyntaxError as e: problems.append(f'{f.name}: the first code cell is not whole Python ({e}): {first[:200]!r}')
        page.evaluate('window.scrollTo(0, document.documentElement.scrollHeight)')
        box = page.evaluate("(() => { const r = document.querySelector('#quarto-sidebar').getBoundingClientRect();"
                            " return [r.top, r.bottom, r.width, window.innerHeight, window.scrollY]; })()")
        if not (box[2] > 0 and box[0] < box[3] and box[1] > 0 and box[4] > 0):
            problems.append(f'{f.name}: sidebar out of view after scrolling to the bottom (top, bottom, width, height, scrollY = {box})')
        seen[f.name] = {'ids': set(page.evaluate("[...document.querySelectorAll('[id]')].map(e => e.id)")),
                        'links': page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))"),
                        'figures': page.evaluate("[...document.querySelectorAll('main img')].filter(i => i.src.startsWith('data:image/png')).length")}
    for name, info in seen.items():
        for href in info['links']:
            u = urllib.parse.urlparse(href)
            if u.scheme or u.netloc or href.startswith(('mailto:', 'data:')): continue
            target = u.path or name
            if target not in seen: problems.append(f'{name}: link to missing page {href}'); continue
            if u.fragment and urllib.parse.unquote(u.fragment) not in seen[target]['ids']:
                problems.append(f'{name}: link to missing anchor {href}')
    assert not errors, errors[:10]
    assert not problems, problems[:20]
    assert sum(i['figures'] for i in seen.values()) > 0, 'no figure on any page: were the outputs stored?'

def test_search_finds_a_page_and_goes_there(site, server, browser):
    "A word only the persistence page holds (in the index built with the site) is found from the home page."
    idx = json.loads((site/'search.json').read_text())
    holders = {e['href'].split('#')[0] for e in idx if 'OWNER_STALE_S' in e['title'] + e['text']}
    assert holders == {'persistence.html'}, holders
    page = browser.new_page()
    for word, want in [('OWNER_STALE_S', {'persistence.html'}), ('CheckpointManager', None)]:
        page.goto(server + 'index.html')
        page.fill('#quarto-search input', word)
        page.wait_for_selector('#quarto-search .search-result', timeout=10_000)
        hrefs = page.evaluate("[...document.querySelectorAll('#quarto-search .search-result')].map(a => a.getAttribute('href'))")
        pages = [urllib.parse.urlparse(h).path.split('/')[-1] for h in hrefs]
        if want: assert set(pages) == want, (word, hrefs)
        assert pages[0] == 'persistence.html', (word, hrefs)
        page.locator('#quarto-search .search-result').first.click()
        page.wait_for_url('**/persistence.html*', timeout=10_000)
        assert page.locator('h1.title').inner_text().startswith('Checkpoints'), page.url
    page.close()
