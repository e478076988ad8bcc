"""``harness site build``: a static farm dashboard over a results store.

Pages are plain HTML files (inline CSS, hand-made inline SVG, one inline script for the search
box), so the site works from ``file://`` and any static web server, and nothing is fetched when
it is viewed. ``model`` computes what each page shows from the trials frame, ``render`` turns a
page's data into HTML (jinja2, autoescape on), ``feed`` writes the Atom feed of alerts and
``build`` decides which pages to (re)write: a page whose inputs' digest is the one recorded in
the site's manifest (``site.json``) is left alone, so a new night rewrites only what it touched.
"""
