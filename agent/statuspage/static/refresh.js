// probed status page: refresh the content in place every data-refresh
// seconds (body attribute; 0: never) without a full reload. The page is
// complete without this script; with JavaScript off a reload refreshes it.
// The fetched page is parsed inertly (DOMParser runs no script) and only
// its #content element replaces ours, so the filter form keeps its input.
(function () {
  "use strict";
  var secs = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  document.documentElement.setAttribute("data-refresh-script", secs > 0 ? "on" : "off");
  if (!(secs > 0)) {
    return;
  }
  function tick() {
    fetch(window.location.href, { cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (resp) {
        if (!resp.ok) {
          throw new Error("status " + resp.status);
        }
        return resp.text();
      })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("content");
        var current = document.getElementById("content");
        if (next && current) {
          current.replaceWith(document.adoptNode(next));
          document.documentElement.setAttribute("data-refreshed", new Date().toISOString());
        }
      })
      .catch(function () {
        document.documentElement.setAttribute("data-refresh-error", new Date().toISOString());
      })
      .finally(function () {
        window.setTimeout(tick, secs * 1000);
      });
  }
  window.setTimeout(tick, secs * 1000);
})();
