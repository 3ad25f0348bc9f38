// Screenshots of the names on the service's pages, one PNG per element,
// in the machine's Chromium (CHROMIUM): what a reader sees of each name.
//
// argv[2]: JSON [{url, rows, key, part}]: for each element matching `rows`
// on the page at `url` (fetched, then shown without its refresh), the element `part` inside it is photographed; the
// name it shows is the row's attribute `key` (or `name` when given).
// stdout: one JSON line per element: {name, sha256, width, height, text}.
import { createHash } from 'node:crypto';
import { chromium } from 'playwright-core';

const jobs = JSON.parse(process.argv[2]);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  for (const job of jobs) {
    // The page as the service served it, without its two-second refresh
    // (a reload under a slow machine's screenshot detaches the element).
    const served = await page.request.get(job.url);
    if (!served.ok()) throw new Error(`${job.url}: HTTP ${served.status()}`);
    const html = (await served.text()).replace(/<meta http-equiv="refresh"[^>]*>/, '');
    await page.setContent(html);
    const rows = page.locator(job.rows);
    const n = await rows.count();
    for (let i = 0; i < n; i++) {
      const row = rows.nth(i);
      const name = job.name ?? await row.getAttribute(job.key);
      const part = row.locator(job.part).first();
      const png = await part.screenshot({ animations: 'disabled' });
      const box = await part.boundingBox();
      const text = await part.innerText();
      console.log(JSON.stringify({
        name,
        sha256: createHash('sha256').update(png).digest('hex'),
        width: box.width,
        height: box.height,
        text,
      }));
    }
  }
} finally {
  await browser.close();
}
