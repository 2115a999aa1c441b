#pragma once
// The job wizard: data set, model, hyperparameters, aggregation rule, fleet policy and
// price table, each field checked as it is edited with the problem shown next to it. A job
// can be saved to and loaded from a job file.
//
// Threads: UI thread.

#include "job/JobSpec.h"

#include <QDialog>
#include <QMap>

#include <functional>

class QCheckBox;
class QComboBox;
class QDialogButtonBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QSpinBox;
class QTabWidget;

namespace flotilla::ui {

class JobWizard : public QDialog
{
    Q_OBJECT

public:
    explicit JobWizard(const JobSpec &job, int localWorkers, QWidget *parent = nullptr);

    JobSpec job() const;
    int localWorkers() const;
    // The problems shown, by field ("training.epochs"); empty when the job can start.
    QMap<QString, QString> problems() const { return m_problems; }
    QString problemText(const QString &field) const;
    QWidget *field(const QString &name) const { return m_fields.value(name); }

    Result<void> loadJobFile(const QString &path);
    Result<void> saveJobFile(const QString &path) const;

private:
    void build();
    void setJob(const JobSpec &job);
    void check();
    QWidget *add(QFormLayout *form, const QString &field, const QString &label, QWidget *editor,
                 const QString &help = {});
    // folder: whether the browse button picks a folder (asked when it is clicked).
    QWidget *withBrowse(QLineEdit *edit, std::function<bool()> folder, const QString &filter);

    JobSpec m_base;
    QTabWidget *m_tabs = nullptr;
    QMap<QString, QWidget *> m_fields;
    QMap<QString, QLabel *> m_errors;
    QMap<QString, QString> m_problems;
    QDialogButtonBox *m_buttons = nullptr;
    bool m_loading = false;

    QLineEdit *m_name = nullptr;
    QComboBox *m_datasetKind = nullptr;
    QLineEdit *m_datasetPath = nullptr;
    QLineEdit *m_labelColumn = nullptr;
    QDoubleSpinBox *m_testFraction = nullptr;
    QSpinBox *m_trainLimit = nullptr;
    QSpinBox *m_testLimit = nullptr;
    QSpinBox *m_imageSize = nullptr;
    QComboBox *m_color = nullptr;
    QComboBox *m_badImages = nullptr;
    QSpinBox *m_cropPadding = nullptr;
    QCheckBox *m_horizontalFlip = nullptr;
    QComboBox *m_modelKind = nullptr;
    QLineEdit *m_modelPath = nullptr;
    QDoubleSpinBox *m_dropout = nullptr;
    QLineEdit *m_hidden = nullptr;
    QSpinBox *m_epochs = nullptr;
    QSpinBox *m_shards = nullptr;
    QSpinBox *m_localEpochs = nullptr;
    QSpinBox *m_localSteps = nullptr;
    QSpinBox *m_batchSize = nullptr;
    QComboBox *m_optimizer = nullptr;
    QLineEdit *m_learningRate = nullptr;
    QDoubleSpinBox *m_momentum = nullptr;
    QCheckBox *m_nesterovSgd = nullptr;
    QDoubleSpinBox *m_weightDecay = nullptr;
    QDoubleSpinBox *m_beta1 = nullptr;
    QDoubleSpinBox *m_beta2 = nullptr;
    QLineEdit *m_eps = nullptr;
    QDoubleSpinBox *m_clipGradNorm = nullptr;
    QDoubleSpinBox *m_labelSmoothing = nullptr;
    QComboBox *m_precision = nullptr;
    QComboBox *m_task = nullptr;
    QComboBox *m_regressionLoss = nullptr;
    QComboBox *m_tokenType = nullptr;
    QSpinBox *m_context = nullptr;
    QComboBox *m_schedule = nullptr;
    QSpinBox *m_warmup = nullptr;
    QDoubleSpinBox *m_floor = nullptr;
    QCheckBox *m_carryOptimizer = nullptr;
    QComboBox *m_bestMetric = nullptr;
    QSpinBox *m_earlyStop = nullptr;
    QSpinBox *m_seed = nullptr;
    QSpinBox *m_threads = nullptr;
    QComboBox *m_rule = nullptr;
    QDoubleSpinBox *m_alpha = nullptr;
    QDoubleSpinBox *m_stalenessExponent = nullptr;
    QDoubleSpinBox *m_outerLearningRate = nullptr;
    QDoubleSpinBox *m_outerMomentum = nullptr;
    QCheckBox *m_nesterov = nullptr;
    QSpinBox *m_momentumPeriod = nullptr;
    QDoubleSpinBox *m_stalenessDamping = nullptr;
    QSpinBox *m_buffer = nullptr;
    QSpinBox *m_epochsAhead = nullptr;
    QCheckBox *m_shareTail = nullptr;
    QCheckBox *m_speculate = nullptr;
    QCheckBox *m_dismissIdle = nullptr;
    QSpinBox *m_localWorkers = nullptr;
    QDoubleSpinBox *m_leaseTimeout = nullptr;
    QDoubleSpinBox *m_targetSubtask = nullptr;
    QDoubleSpinBox *m_heartbeatTimeout = nullptr;
    QDoubleSpinBox *m_preemptMean = nullptr;
    QDoubleSpinBox *m_noticeFraction = nullptr;
    QDoubleSpinBox *m_rejoinDelay = nullptr;
    QComboBox *m_instanceType = nullptr;
    QComboBox *m_priceClass = nullptr;
    QComboBox *m_compression = nullptr;
    QComboBox *m_requireDevice = nullptr;
    QSpinBox *m_requireMemory = nullptr;
    QLineEdit *m_priceTable = nullptr;
};

} // namespace flotilla::ui
