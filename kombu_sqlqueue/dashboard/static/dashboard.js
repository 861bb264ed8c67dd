/* The dashboard's plots: each element with data-series is filled with uPlot charts of the
   columns /series answers (numbers only; every label here is this file's own), fetched
   again every sample. */
(function () {
  "use strict";
  var DEPTH = [["ready", "#2563eb"], ["held", "#d97706"], ["delayed", "#6b7280"]];
  var RATES = [["enqueued", "#2563eb"], ["done", "#16a34a"], ["failed", "#dc2626"]];

  function options(title, lines, width) {
    return {
      title: title,
      width: width,
      height: 180,
      scales: { x: { time: true } },
      series: [{}].concat(lines.map(function (line) {
        return { label: line[0], stroke: line[1], width: 1.5, spanGaps: false };
      })),
      axes: [{}, { size: 60 }],
    };
  }

  function columns(found, lines) {
    return [found.t].concat(lines.map(function (line) { return found[line[0]]; }));
  }

  function plot(box) {
    var url = box.getAttribute("data-series");
    var withRates = box.getAttribute("data-rates") === "yes";
    var charts = null;

    function draw(found) {
      var width = Math.max(320, Math.floor(box.clientWidth / (withRates ? 2 : 1)) - 16);
      if (charts === null) {
        charts = [new uPlot(options("jobs waiting and held", DEPTH, width), columns(found, DEPTH), box)];
        if (withRates) {
          charts.push(new uPlot(options("jobs per second", RATES, width), columns(found, RATES), box));
        }
      } else {
        charts[0].setData(columns(found, DEPTH));
        if (withRates) { charts[1].setData(columns(found, RATES)); }
      }
      box.setAttribute("data-samples", String(found.t.length));
    }

    function load() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (found) {
          if (found) {
            draw(found);
            window.setTimeout(load, Math.max(1, found.every) * 1000);
          } else {
            window.setTimeout(load, 10000);
          }
        })
        .catch(function () { window.setTimeout(load, 10000); });  // down: try again
    }
    load();
  }

  document.querySelectorAll("[data-series]").forEach(plot);
})();
