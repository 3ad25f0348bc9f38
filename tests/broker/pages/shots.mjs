// Screenshots of the names on the service's pages, one PNG per element,
// in the machine's Chromium (CHROMIUM): what a reader sees of each name.
//
// argv[2]: JSON [{url, rows, key, part, rowHeight?}]: for each element
// matching `rows` on the page at `url` (fetched, then shown without its
// refresh), the element `part` inside it is photographed; the name it shows
// is the row's attribute `key` (or `name` when given). With `rowHeight`
// (thousands of rows), every row is set to that many pixels and the parts
// are cut out of viewport screenshots by their boxes (pngjs), each part at
// a whole pixel, as an element screenshot would show it.
// stdout: one JSON line per element: {name, sha256, width, height, text}.
import { createHash } from 'node:crypto';
import { chromium } from 'playwright-core';
import pngjs from 'pngjs';

const VIEWPORT = { width: 1400, height: 900 };

/// The parts of every row, cut out of viewport screenshots.
async function together(page, job) {
  const h = job.rowHeight;
  // Tall screenshots: fewer of them (each waits for a frame).
  await page.setViewportSize({ width: VIEWPORT.width, height: 6000 });
  await page.addStyleTag({
    content: `${job.rows}{height:${h}px}${job.rows} td{height:${h}px;padding-top:0;padding-bottom:0;` +
      `line-height:${h}px;white-space:nowrap;overflow:hidden}`,
  });
  const parts = await page.$$eval(job.rows, (rows, [key, part]) => rows.map((row) => {
    const p = row.querySelector(part);
    const b = p.getBoundingClientRect();
    return { name: row.getAttribute(key), x: b.x + window.scrollX, y: b.y + window.scrollY,
      width: b.width, height: b.height, text: p.innerText };
  }), [job.key, job.part]);
  let i = 0;
  while (i < parts.length) {
    const top = Math.floor(parts[i].y);
    await page.evaluate((y) => window.scrollTo(0, y), top);
    const scrolled = await page.evaluate(() => window.scrollY);
    const png = pngjs.PNG.sync.read(await page.screenshot({ animations: 'disabled' }));
    let cut = 0;
    for (; i < parts.length; i++) {
      const p = parts[i];
      const [x0, y0] = [Math.floor(p.x), Math.floor(p.y - scrolled)];
      const [x1, y1] = [Math.ceil(p.x + p.width), Math.ceil(p.y + p.height - scrolled)];
      if (y0 < 0) throw new Error(`${p.name}: above the viewport`);
      if (y1 > png.height || x1 > png.width) break;
      const hash = createHash('sha256');
      hash.update(`${x1 - x0}x${y1 - y0}`);
      for (let y = y0; y < y1; y++) {
        hash.update(png.data.subarray((y * png.width + x0) * 4, (y * png.width + x1) * 4));
      }
      console.log(JSON.stringify({ name: p.name, sha256: hash.digest('hex'),
        width: x1 - x0, height: y1 - y0, text: p.text }));
      cut++;
    }
    if (cut === 0) throw new Error(`${parts[i].name}: taller than the viewport`);
  }
  await page.setViewportSize(VIEWPORT);
}

const jobs = JSON.parse(process.argv[2]);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = await browser.newPage({ viewport: VIEWPORT });
  for (const job of jobs) {
    // The page as the service served it, without its two-second refresh
    // (a reload under a slow machine's screenshot detaches the element).
    const served = await page.request.get(job.url);
    if (!served.ok()) throw new Error(`${job.url}: HTTP ${served.status()}`);
    const html = (await served.text()).replace(/<meta http-equiv="refresh"[^>]*>/, '');
    await page.setContent(html);
    if (job.rowHeight) {
      await together(page, job);
      continue;
    }
    // Element handles, found once: a page of thousands of rows is not
    // searched again for each.
    const rows = await page.$$(job.rows);
    for (const row of rows) {
      const name = job.name ?? await row.getAttribute(job.key);
      const part = await row.$(job.part);
      if (!part) throw new Error(`${job.url}: no ${job.part} in a row of ${name}`);
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
