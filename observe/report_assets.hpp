// The report page's own files, embedded when the program is built (cmake/embed.cmake): the
// charting library uPlot (third_party/uplot: script, style sheet, licence) and the page's
// script and style (observe/report_page.js, observe/report_page.css). Each is a NUL-terminated
// string.
#pragma once

namespace diloco::report_assets {

extern const char uplot_js[];
extern const char uplot_css[];
extern const char uplot_license[];
extern const char uplot_version[];
extern const char page_js[];
extern const char page_css[];

}  // namespace diloco::report_assets
