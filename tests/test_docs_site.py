"""The docs site, built from the notebooks without Quarto, read in a real browser.

`tools/build_docs.py` builds the site; headless Chromium (Debian's `chromium`, driven by Playwright
for Python) loads every page and checks its title, its API entries, its figures, that the console
stays free of errors, and that no internal link is broken. Where Chromium or Playwright is missing
the test skips with one line saying which."""
import functools, http.server, shutil, subprocess, sys, threading, urllib.parse
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
        if f.name not in ('index.html', 'results.html') and page.locator('main h3').count() == 0:
            problems.append(f'{f.name}: no API entries (show_doc output)')
        broken_imgs = page.evaluate("[...document.images].filter(i => (i.src.startsWith('data:') || i.src.startsWith(location.origin))"
                                    " && (!i.complete || i.naturalWidth === 0)).length")
        if broken_imgs: problems.append(f'{f.name}: {broken_imgs} images that did not load')
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
