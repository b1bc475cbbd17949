// dlib's 68-point shape predictor (shape_predictor_68_face_landmarks.dat,
// Debian libdlib-data) on exactly the faces and boxes spry was scored on: the
// CSV `spry eval --per-face` writes (image, box_source, x, y, w, h, ...). Truth
// comes from the folder's keypoints.csv. Prints one JSON line with the same
// metrics spry eval prints (NME with the outer eye corners 36/45).
// Dev-time peer, benchmarks only; build and run with bench/run_keypoints.sh.
#include <dlib/image_io.h>
#include <dlib/image_processing.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

static std::vector<std::string> split(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string c;
  while (std::getline(ss, c, ',')) out.push_back(c);
  return out;
}

static std::string base(const std::string &p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: dlib_landmarks PER_FACE.csv KEYPOINTS.csv MODEL.dat\n");
    return 2;
  }
  std::map<std::string, std::vector<double>> truth;
  std::ifstream kp(argv[2]);
  std::string line;
  std::getline(kp, line);
  while (std::getline(kp, line)) {
    auto c = split(line);
    if (c.size() != 137) continue;
    std::vector<double> v;
    for (size_t i = 1; i < c.size(); i++) v.push_back(std::stod(c[i]));
    truth[c[0]] = v;
  }
  dlib::shape_predictor sp;
  dlib::deserialize(argv[3]) >> sp;
  std::ifstream faces(argv[1]);
  std::getline(faces, line);
  double sum_nme = 0, sum_px = 0, f8 = 0, f10 = 0, auc = 0;
  int n = 0;
  std::map<std::string, int> sources;
  while (std::getline(faces, line)) {
    auto c = split(line);
    if (c.size() < 6) continue;
    auto t = truth.find(base(c[0]));
    if (t == truth.end()) {
      std::fprintf(stderr, "no truth for %s\n", c[0].c_str());
      return 1;
    }
    dlib::array2d<dlib::rgb_pixel> img;
    dlib::load_image(img, c[0]);
    // spry's box (x, y, w, h) names its first pixel and its size; dlib's
    // rectangles are inclusive.
    long x = std::lround(std::stod(c[2])), y = std::lround(std::stod(c[3]));
    long w = std::lround(std::stod(c[4])), h = std::lround(std::stod(c[5]));
    dlib::full_object_detection s = sp(img, dlib::rectangle(x, y, x + w - 1, y + h - 1));
    const std::vector<double> &g = t->second;
    double face = 0;
    for (int i = 0; i < 68; i++) face += std::hypot(s.part(i).x() - g[2 * i], s.part(i).y() - g[2 * i + 1]);
    face /= 68;
    double io = std::hypot(g[2 * 36] - g[2 * 45], g[2 * 36 + 1] - g[2 * 45 + 1]);
    double nme = face / io;
    sum_px += face, sum_nme += nme, f8 += nme > 0.08, f10 += nme > 0.10;
    auc += nme < 0.10 ? 1 - nme / 0.10 : 0;
    sources[c[1]]++;
    n++;
  }
  std::printf("{\"impl\":\"dlib shape_predictor_68\",\"count\":%d,\"mean_px\":%.4f,\"nme_io\":%.5f,\"fr_008\":%.4f,"
              "\"fr_010\":%.4f,\"auc_010\":%.4f", n, sum_px / n, sum_nme / n, f8 / n, f10 / n, auc / n);
  for (auto &s : sources) std::printf(",\"box_%s\":%d", s.first.c_str(), s.second);
  std::printf("}\n");
  return 0;
}
