// What pptr-intercept.mjs and pw-route.mjs share: the run's pages, how a
// client's own interception treats and lists each request, and the steps
// both take before their own authentication step.
import { env, errorPage, warm } from './lib.mjs';

// interceptRun reads BROWSER_URL, BASE and RUN. seen lists the requests
// that act handled, with the host and run id replaced, so the Go test can
// compare a run against the relay with one against Chromium itself.
export function interceptRun() {
  const base = env('BASE');
  const run = env('RUN');
  const seen = [];
  const normal = (url) => url.replaceAll(base, 'BASE').replaceAll(encodeURIComponent(base), 'BASE').replaceAll(run, 'RUN');
  return {
    browserURL: env('BROWSER_URL'),
    base,
    run,
    seen,
    page: (step, extra = {}) => `${base}/page?` + new URLSearchParams({ run, s: String(step), ...extra }),
    // act returns what to do with an intercepted request (continue, abort
    // or respond, as its URL's act says) and lists it in seen.
    act(req) {
      const url = new URL(req.url());
      // Favicons come and go with how long a page stays up; warm-ups are
      // not part of the comparison.
      if (url.protocol !== 'http:' || url.pathname === '/favicon.ico' || url.searchParams.has('warm')) return 'continue';
      const act = url.searchParams.get('act');
      seen.push(`${req.method()} ${normal(req.url())} ${req.resourceType()}${req.isNavigationRequest() ? ' navigation' : ''} ${act || 'continue'}`);
      return act || 'continue';
    },
  };
}

// fulfilled is what a request whose act is respond is answered with.
export const fulfilled = { status: 200, contentType: 'text/html', body: '<title>fulfilled</title>fulfilled by the client' };

// interceptSteps takes steps 1 to 6 on p, each timed in log: warm, a page with subresources,
// one the client answers, a link, reload, click (clickLink clicks #link
// and waits for step 4), one the client aborts, and a plain goto.
export async function interceptSteps({ page, base }, log, p, clickLink) {
  await log.run('warm', () => warm(p, base));
  await log.run('goto with subresources', () => p.goto(page(1, { sub: '1' })));
  await log.run('goto respond', async () => {
    await p.goto(page(2, { act: 'respond' }));
    if ((await p.title()) !== 'fulfilled') throw new Error(`respond: title ${await p.title()}`);
  });
  await log.run('goto', () => p.goto(page(3, { link: page(4) })));
  await log.run('reload', () => p.reload());
  await log.run('click', clickLink);
  // Aborting leaves an error page, after which Puppeteer (direct too)
  // sometimes loses the page's session on a reload: nothing reloads after it.
  await log.run('goto abort', async () => {
    const err = await p.goto(page(5, { act: 'abort' })).then(() => null, (e) => e);
    if (!err) throw new Error('an aborted navigation succeeded');
    await errorPage(p);
  });
  await log.run('goto', () => p.goto(page(6)));
}

// authURL is step 7, a page behind basic authentication.
export const authURL = ({ base, run }) => `${base}/auth?` + new URLSearchParams({ run, s: '7' });
