#include "bench/ParityData.h"

#include "common/Random.h"

#include <QDir>
#include <QFile>
#include <QImage>
#include <QPainter>
#include <QPainterPath>
#include <QPolygonF>

#include <cmath>

namespace flotilla {

namespace {

constexpr double kPi = 3.14159265358979323846;

QImage shapeImage(int cls, int size, SplitMix64 &g)
{
    QImage image(size, size, QImage::Format_RGB32);
    // A noisy background of a random dull colour.
    const int br = int(g.below(100)), bg = int(g.below(100)), bb = int(g.below(100));
    for (int y = 0; y < size; ++y) {
        auto *line = reinterpret_cast<QRgb *>(image.scanLine(y));
        for (int x = 0; x < size; ++x) {
            const int n = int(g.below(41)) - 20;
            line[x] = qRgb(std::clamp(br + n, 0, 255), std::clamp(bg + n, 0, 255), std::clamp(bb + n, 0, 255));
        }
    }
    QPainter p(&image);
    p.setRenderHint(QPainter::Antialiasing);
    const QColor colour(110 + int(g.below(146)), 110 + int(g.below(146)), 110 + int(g.below(146)));
    p.setPen(Qt::NoPen);
    p.setBrush(colour);
    const double s = size;
    const double r = s * (0.26 + 0.14 * g.uniform()); // half the shape's extent
    const double cx = r + (s - 2 * r) * g.uniform();
    const double cy = r + (s - 2 * r) * g.uniform();
    const double turn = 2 * kPi * g.uniform();
    switch (cls) {
    case 0: // circle
        p.drawEllipse(QPointF(cx, cy), r, r);
        break;
    case 1: { // cross
        QPainterPath path;
        const double w = r * 0.35;
        path.addRect(QRectF(-r, -w, 2 * r, 2 * w));
        path.addRect(QRectF(-w, -r, 2 * w, 2 * r));
        p.translate(cx, cy);
        p.rotate(turn * 180 / kPi);
        p.drawPath(path.simplified());
        break;
    }
    case 2: { // square
        p.translate(cx, cy);
        p.rotate(turn * 180 / kPi);
        p.drawRect(QRectF(-r * 0.8, -r * 0.8, 1.6 * r, 1.6 * r));
        break;
    }
    default: { // triangle
        QPolygonF triangle;
        for (int k = 0; k < 3; ++k)
            triangle << QPointF(cx + r * std::cos(turn + 2 * kPi * k / 3), cy + r * std::sin(turn + 2 * kPi * k / 3));
        p.drawPolygon(triangle);
        break;
    }
    }
    p.end();
    return image;
}

} // namespace

Result<void> writeShapesFolder(const QString &dir, const ShapesFolderConfig &config)
{
    static const char *const names[] = {"circle", "cross", "square", "triangle"};
    SplitMix64 g(config.seed);
    for (const char *split : {"train", "test"}) {
        const int count = QLatin1String(split) == QLatin1String("train") ? config.trainPerClass : config.testPerClass;
        for (int cls = 0; cls < 4; ++cls) {
            const QString folder = QDir(dir).filePath(QStringLiteral("%1/%2").arg(QLatin1String(split), QLatin1String(names[cls])));
            if (!QDir().mkpath(folder))
                return fail(QStringLiteral("cannot create the folder '%1'").arg(folder));
            for (int i = 0; i < count; ++i) {
                const QString file = QDir(folder).filePath(QStringLiteral("%1.png").arg(i, 4, 10, QLatin1Char('0')));
                if (!shapeImage(cls, config.size, g).save(file, "PNG"))
                    return fail(QStringLiteral("cannot write the image '%1'").arg(file));
            }
        }
    }
    return {};
}

Result<void> writeTableCsv(const QString &file, const TableConfig &config)
{
    QFile out(file);
    if (!out.open(QIODevice::WriteOnly | QIODevice::Truncate))
        return fail(QStringLiteral("cannot write '%1': %2").arg(file, out.errorString()));
    SplitMix64 g(config.seed);
    const auto normal = [&g] {
        // Box–Muller, from two uniforms in (0, 1].
        const double u = 1.0 - g.uniform(), v = g.uniform();
        return std::sqrt(-2.0 * std::log(u)) * std::cos(2 * kPi * v);
    };
    QByteArray text;
    for (int f = 0; f < config.features; ++f)
        text += "f" + QByteArray::number(f + 1) + ",";
    text += "label\n";
    for (int row = 0; row < config.rows; ++row) {
        // The class is the sector of the angle in the first two features' plane, bent by the
        // radius, so no straight line separates the classes.
        const double a = normal(), b = normal();
        const double angle = std::atan2(b, a) + 0.8 * std::sqrt(a * a + b * b);
        int label = int(std::floor((angle + 4 * kPi) / (2 * kPi / config.classes))) % config.classes;
        if (g.uniform() < config.labelNoise)
            label = int(g.below(std::uint64_t(config.classes)));
        for (int f = 0; f < config.features; ++f) {
            double v;
            if (f == 0)
                v = a * 1000.0 + 5000.0; // the same information in very different units
            else if (f == 1)
                v = b * 0.01;
            else if (f == 2)
                v = a * b + 0.3 * normal();
            else
                v = normal() * double(1 + f);
            text += QByteArray::number(v, 'g', 7) + ",";
        }
        text += QByteArray::number(label) + "\n";
    }
    if (out.write(text) != text.size() || !out.flush())
        return fail(QStringLiteral("cannot write '%1': %2").arg(file, out.errorString()));
    return {};
}

} // namespace flotilla
