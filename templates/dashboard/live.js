// tickswarm run --dashboard: swaps in the report the run renders each second, and the final
// report when the run ends. Served by the run itself (its page's policy allows this origin's
// script and event stream only).
(function () {
  'use strict';
  var events = new EventSource('/events');
  var finished = false;
  function show(e) {
    document.body.innerHTML = e.data;
    var bar = document.getElementById('live');
    if (bar && bar.dataset.title) {
      document.title = bar.dataset.title;
    }
  }
  events.addEventListener('update', show);
  events.addEventListener('final', function (e) {
    finished = true;
    events.close();
    show(e);
  });
  events.onerror = function () {
    // The run ended without its final event (killed), or the network went: say so; the
    // browser retries by itself while the page stays open.
    var bar = document.getElementById('live');
    if (finished || !bar) {
      return;
    }
    bar.className = 'live lost';
    var state = bar.querySelector('.state');
    if (state) {
      state.textContent = 'no connection to the run (ended or unreachable); retrying';
    }
  };
})();
