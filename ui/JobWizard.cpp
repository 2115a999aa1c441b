#include "ui/JobWizard.h"

#include "ui/Dialogs.h"

#include "job/PriceTable.h"
#include "job/Tasks.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QTabWidget>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

QSpinBox *spin(int lo, int hi)
{
    auto *s = new QSpinBox;
    s->setRange(lo, hi);
    return s;
}

QDoubleSpinBox *dspin(double lo, double hi, int decimals, double step)
{
    auto *s = new QDoubleSpinBox;
    s->setRange(lo, hi);
    s->setDecimals(decimals);
    s->setSingleStep(step);
    return s;
}

QComboBox *combo(const QStringList &items)
{
    auto *c = new QComboBox;
    c->addItems(items);
    return c;
}

} // namespace

JobWizard::JobWizard(const JobSpec &job, int localWorkers, QWidget *parent) : QDialog(parent), m_base(job)
{
    setWindowTitle(tr("Job"));
    setMinimumSize(640, 560);
    build();
    setJob(job);
    m_localWorkers->setValue(localWorkers);
    check();
}

QWidget *JobWizard::withBrowse(QLineEdit *edit, std::function<bool()> folder, const QString &filter)
{
    auto *box = new QWidget;
    auto *row = new QHBoxLayout(box);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(edit);
    auto *browse = new QPushButton(tr("Browse…"));
    row->addWidget(browse);
    connect(browse, &QPushButton::clicked, this, [this, edit, folder, filter] {
        const QString path = folder() ? QFileDialog::getExistingDirectory(this, tr("Choose a folder"), edit->text())
                                    : QFileDialog::getOpenFileName(this, tr("Choose a file"), edit->text(), filter);
        if (!path.isEmpty())
            edit->setText(path);
    });
    return box;
}

QWidget *JobWizard::add(QFormLayout *form, const QString &fieldName, const QString &label, QWidget *editor,
                        const QString &help)
{
    auto *cell = new QWidget;
    auto *column = new QVBoxLayout(cell);
    column->setContentsMargins(0, 0, 0, 0);
    column->setSpacing(1);
    column->addWidget(editor);
    auto *error = new QLabel;
    error->setStyleSheet(QStringLiteral("color: #c0392b;"));
    error->setWordWrap(true);
    error->hide();
    column->addWidget(error);
    if (!help.isEmpty())
        editor->setToolTip(help);
    form->addRow(label, cell);
    m_fields.insert(fieldName, editor);
    m_errors.insert(fieldName, error);
    return editor;
}

void JobWizard::build()
{
    auto *layout = new QVBoxLayout(this);
    m_tabs = new QTabWidget;
    layout->addWidget(m_tabs);
    auto page = [this](const QString &title) {
        auto *w = new QWidget;
        auto *form = new QFormLayout(w);
        form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
        m_tabs->addTab(w, title);
        return form;
    };

    QFormLayout *data = page(tr("Data"));
    m_name = new QLineEdit;
    add(data, QStringLiteral("name"), tr("Job name"), m_name);
    m_datasetKind = combo({QStringLiteral("fashion-mnist"), QStringLiteral("idx"), QStringLiteral("csv"),
                           QStringLiteral("images"), QStringLiteral("npy"), QStringLiteral("tokens")});
    add(data, QStringLiteral("dataset.kind"), tr("Data set"), m_datasetKind,
        tr("fashion-mnist: Debian's dataset-fashion-mnist; idx: a folder of IDX files; csv: a table; images: a folder "
           "of class folders (train/<class>/ and test/<class>/, or <class>/ alone); npy: a folder with x.npy and y.npy, or a .npz; "
           "tokens: a file of token ids (train.bin), or a folder with train.bin and val.bin"));
    m_datasetPath = new QLineEdit;
    m_datasetPath->setPlaceholderText(tr("folder of IDX files, the CSV file, or the image folder"));
    add(data, QStringLiteral("dataset.path"), tr("Location"),
        withBrowse(m_datasetPath, [this] { return m_datasetKind->currentText() != QLatin1String("csv"); },
                   tr("All files (*)")));
    m_fields.insert(QStringLiteral("dataset.path"), m_datasetPath);
    m_labelColumn = new QLineEdit;
    m_labelColumn->setPlaceholderText(tr("CSV: name or number of the label column (default: last); several for "
                                         "regression or multi-label: a,b,c"));
    add(data, QStringLiteral("dataset.label_column"), tr("Label column"), m_labelColumn);
    m_tokenType = combo({QStringLiteral("uint16"), QStringLiteral("uint32")});
    add(data, QStringLiteral("dataset.token_type"), tr("Token ids"), m_tokenType,
        tr("Tokens: the type of the ids in the file (nanoGPT writes uint16)"));
    m_context = spin(1, 65536);
    m_context->setSuffix(tr(" tokens"));
    add(data, QStringLiteral("dataset.context"), tr("Context"), m_context,
        tr("Tokens: each sample is this many tokens and the same shifted by one"));
    m_testFraction = dspin(0.01, 0.9, 2, 0.05);
    add(data, QStringLiteral("dataset.test_fraction"), tr("Held-out test share"), m_testFraction,
        tr("Used when the data has no test split of its own"));
    m_trainLimit = spin(0, 100000000);
    m_trainLimit->setSpecialValueText(tr("all"));
    add(data, QStringLiteral("dataset.train_limit"), tr("Training samples"), m_trainLimit);
    m_testLimit = spin(0, 100000000);
    m_testLimit->setSpecialValueText(tr("all"));
    add(data, QStringLiteral("dataset.test_limit"), tr("Test samples"), m_testLimit);
    m_imageSize = spin(0, 4096);
    m_imageSize->setSpecialValueText(tr("as stored"));
    m_imageSize->setSuffix(tr(" px"));
    add(data, QStringLiteral("dataset.image_size"), tr("Image size"), m_imageSize,
        tr("Images: every image is resized to this many pixels square; 'as stored' needs them all the same size"));
    m_color = combo({QStringLiteral("auto"), QStringLiteral("gray"), QStringLiteral("rgb")});
    add(data, QStringLiteral("dataset.color"), tr("Colour"), m_color,
        tr("Images: auto is rgb if the first image of any class is in colour, else gray"));
    m_badImages = combo({QStringLiteral("stop"), QStringLiteral("skip")});
    add(data, QStringLiteral("dataset.bad_images"), tr("Unreadable images"), m_badImages,
        tr("Images: stop at the first unreadable or truncated file (naming it), or skip such files and count them"));
    m_cropPadding = spin(0, 1024);
    m_cropPadding->setSpecialValueText(tr("off"));
    m_cropPadding->setSuffix(tr(" px"));
    add(data, QStringLiteral("dataset.crop_padding"), tr("Random crop padding"), m_cropPadding,
        tr("Augmentation of training images: pad each side, then crop the original size at a random place"));
    m_horizontalFlip = new QCheckBox(tr("Mirror training images at random"));
    add(data, QStringLiteral("dataset.horizontal_flip"), tr("Horizontal flip"), m_horizontalFlip);

    QFormLayout *model = page(tr("Model"));
    m_modelKind = combo({QStringLiteral("cnn"), QStringLiteral("mlp"), QStringLiteral("resnet"), QStringLiteral("torchscript")});
    add(model, QStringLiteral("model.kind"), tr("Model"), m_modelKind);
    m_modelPath = new QLineEdit;
    m_modelPath->setPlaceholderText(tr("torch.jit.script(model).save(\"net.pt\") in Python"));
    add(model, QStringLiteral("model.path"), tr("TorchScript file"),
        withBrowse(m_modelPath, [] { return false; }, tr("TorchScript (*.pt)")));
    m_fields.insert(QStringLiteral("model.path"), m_modelPath);
    m_dropout = dspin(0, 0.9, 2, 0.05);
    add(model, QStringLiteral("model.dropout"), tr("Dropout"), m_dropout);
    m_hidden = new QLineEdit;
    m_hidden->setPlaceholderText(QStringLiteral("256, 128"));
    add(model, QStringLiteral("model.hidden"), tr("MLP hidden layers"), m_hidden);

    QFormLayout *training = page(tr("Training"));
    m_task = combo(taskNames());
    add(training, QStringLiteral("training.task"), tr("Task"), m_task,
        tr("classification: a class per sample; regression: numbers (CSV target columns or y.npy); multi-label: a 0 "
           "or 1 per label; next-token: a token file and a TorchScript language model"));
    m_regressionLoss = combo({QStringLiteral("mse"), QStringLiteral("l1")});
    add(training, QStringLiteral("training.regression_loss"), tr("Regression loss"), m_regressionLoss);
    m_epochs = spin(0, 100000);
    add(training, QStringLiteral("training.epochs"), tr("Epochs"), m_epochs);
    m_shards = spin(0, 1000000);
    m_shards->setSpecialValueText(tr("from the data"));
    add(training, QStringLiteral("training.shards"), tr("Shards"), m_shards,
        tr("One subtask per shard per epoch; \"from the data\": as many as give each subtask at least 16 optimizer steps"));
    m_localEpochs = spin(0, 1000);
    add(training, QStringLiteral("training.local_epochs"), tr("Local epochs per subtask"), m_localEpochs);
    m_localSteps = spin(0, 10000000);
    m_localSteps->setSpecialValueText(tr("off (use local epochs)"));
    add(training, QStringLiteral("training.local_steps"), tr("Local steps per subtask"), m_localSteps);
    m_batchSize = spin(0, 65536);
    add(training, QStringLiteral("training.batch_size"), tr("Batch size"), m_batchSize);
    m_optimizer = combo({QStringLiteral("sgd"), QStringLiteral("adam"), QStringLiteral("adamw")});
    add(training, QStringLiteral("training.optimizer"), tr("Optimizer"), m_optimizer,
        tr("adamw: Adam with decoupled weight decay (the weights shrink by learning rate × weight decay each step)"));
    m_learningRate = new QLineEdit;
    add(training, QStringLiteral("training.learning_rate"), tr("Learning rate"), m_learningRate);
    m_momentum = dspin(0, 0.999, 3, 0.05);
    add(training, QStringLiteral("training.momentum"), tr("Momentum"), m_momentum);
    m_nesterovSgd = new QCheckBox(tr("Nesterov momentum"));
    add(training, QStringLiteral("training.nesterov"), QString(), m_nesterovSgd, tr("sgd with momentum only"));
    m_weightDecay = dspin(0, 1, 5, 0.0001);
    add(training, QStringLiteral("training.weight_decay"), tr("Weight decay"), m_weightDecay,
        tr("sgd, adam: L2 added to the gradient; adamw: decoupled"));
    m_beta1 = dspin(0, 0.9999, 4, 0.01);
    add(training, QStringLiteral("training.beta1"), tr("β1"), m_beta1, tr("adam, adamw: decay of the first moment"));
    m_beta2 = dspin(0, 0.99999, 5, 0.001);
    add(training, QStringLiteral("training.beta2"), tr("β2"), m_beta2, tr("adam, adamw: decay of the second moment"));
    m_eps = new QLineEdit;
    add(training, QStringLiteral("training.eps"), tr("ε"), m_eps, tr("adam, adamw: added to the denominator"));
    m_clipGradNorm = dspin(0, 1e6, 3, 0.1);
    m_clipGradNorm->setSpecialValueText(tr("off"));
    add(training, QStringLiteral("training.clip_grad_norm"), tr("Gradient clipping"), m_clipGradNorm,
        tr("The gradients' global norm is clipped to this before each step"));
    m_labelSmoothing = dspin(0, 0.99, 2, 0.05);
    m_labelSmoothing->setSpecialValueText(tr("off"));
    add(training, QStringLiteral("training.label_smoothing"), tr("Label smoothing"), m_labelSmoothing);
    m_precision = combo(precisionNames());
    add(training, QStringLiteral("training.precision"), tr("Precision"), m_precision,
        tr("The forward pass under autocast; fp16 only on a GPU. The weights stay float32."));
    m_schedule = combo({QStringLiteral("constant"), QStringLiteral("step"), QStringLiteral("cosine")});
    add(training, QStringLiteral("training.lr_schedule"), tr("Schedule"), m_schedule,
        tr("Per optimizer step over the whole job"));
    m_warmup = spin(0, 100000000);
    m_warmup->setSpecialValueText(tr("none"));
    m_warmup->setSuffix(tr(" steps"));
    add(training, QStringLiteral("training.lr_warmup_steps"), tr("Warmup"), m_warmup,
        tr("The learning rate rises linearly to its value over this many optimizer steps"));
    m_floor = dspin(0, 1, 3, 0.01);
    add(training, QStringLiteral("training.lr_floor"), tr("Cosine floor"), m_floor,
        tr("Cosine: the last step's rate as a share of the learning rate"));
    m_carryOptimizer = new QCheckBox(tr("Workers keep their optimizer's state between subtasks"));
    add(training, QStringLiteral("training.carry_optimizer"), QString(), m_carryOptimizer,
        tr("Momentum buffers and Adam's moments go on from one subtask to the next, as in one process's loop"));
    m_bestMetric = combo({QStringLiteral("accuracy"), QStringLiteral("score"), QStringLiteral("loss")});
    add(training, QStringLiteral("training.best_metric"), tr("Best model by"), m_bestMetric,
        tr("The model with the best test score (accuracy, R², mean F1 or token accuracy, by task) or the lowest test "
           "loss is kept as model-best.pt"));
    m_earlyStop = spin(0, 100000);
    m_earlyStop->setSpecialValueText(tr("off"));
    m_earlyStop->setSuffix(tr(" evaluations"));
    add(training, QStringLiteral("training.early_stop_after"), tr("Stop early after"), m_earlyStop,
        tr("End the job after this many evaluations in a row without a better model"));
    m_seed = spin(0, 2000000000);
    add(training, QStringLiteral("training.seed"), tr("Seed"), m_seed);
    m_threads = spin(0, 1024);
    add(training, QStringLiteral("training.threads"), tr("Threads per worker"), m_threads);

    QFormLayout *aggregation = page(tr("Aggregation"));
    m_rule = combo(aggregationRuleNames());
    add(aggregation, QStringLiteral("aggregation.rule"), tr("Rule"), m_rule);
    m_alpha = dspin(0, 0.999, 3, 0.05);
    add(aggregation, QStringLiteral("aggregation.alpha"), tr("α (weight the global model keeps)"), m_alpha);
    m_stalenessExponent = dspin(0, 10, 2, 0.1);
    add(aggregation, QStringLiteral("aggregation.staleness_exponent"), tr("Staleness exponent"), m_stalenessExponent);
    m_outerLearningRate = dspin(0, 10, 3, 0.1);
    add(aggregation, QStringLiteral("aggregation.outer_learning_rate"), tr("Outer learning rate"), m_outerLearningRate);
    m_outerMomentum = dspin(0, 0.999, 3, 0.05);
    add(aggregation, QStringLiteral("aggregation.outer_momentum"), tr("Outer momentum"), m_outerMomentum);
    m_nesterov = new QCheckBox(tr("Nesterov"));
    add(aggregation, QStringLiteral("aggregation.nesterov"), QString(), m_nesterov);
    m_momentumPeriod = spin(0, 100000);
    m_momentumPeriod->setSpecialValueText(tr("workers online"));
    add(aggregation, QStringLiteral("aggregation.momentum_period"), tr("Momentum updated every"), m_momentumPeriod,
        tr("async-delta with outer momentum: once every this many results (Delayed Nesterov)"));
    m_stalenessDamping = dspin(0, 10, 2, 0.1);
    add(aggregation, QStringLiteral("aggregation.staleness_damping"), tr("Staleness damping"), m_stalenessDamping,
        tr("async-delta: a result s versions stale counts (1 + s)^-p"));
    m_buffer = spin(0, 100000);
    m_buffer->setSpecialValueText(tr("√ workers online"));
    add(aggregation, QStringLiteral("aggregation.buffer"), tr("Results per version"), m_buffer,
        tr("Asynchronous rules: fold the mean of this many results as one version (1: each result is its own); for "
           "large fleets, whose results would otherwise be hundreds of versions stale"));

    QFormLayout *fleet = page(tr("Fleet"));
    m_localWorkers = spin(0, 64);
    add(fleet, QStringLiteral("fleet.workers"), tr("Workers in this app"), m_localWorkers,
        tr("Workers that train inside the control center; remote workers join with a token"));
    m_leaseTimeout = dspin(0, 7 * 24 * 3600, 0, 10);
    m_leaseTimeout->setSuffix(tr(" s"));
    add(fleet, QStringLiteral("fleet.lease_timeout_s"), tr("Lease deadline (at most)"), m_leaseTimeout);
    m_targetSubtask = dspin(0, 7 * 24 * 3600, 0, 10);
    m_targetSubtask->setSuffix(tr(" s"));
    m_targetSubtask->setSpecialValueText(tr("whole shards"));
    add(fleet, QStringLiteral("fleet.target_subtask_s"), tr("Target subtask duration"), m_targetSubtask);
    m_epochsAhead = spin(0, 64);
    add(fleet, QStringLiteral("fleet.epochs_ahead"), tr("Epochs open at once"), m_epochsAhead,
        tr("Asynchronous rules: how many epochs past the oldest unfinished one may be handed out"));
    m_shareTail = new QCheckBox(tr("Smaller subtasks near an epoch's end"));
    add(fleet, QStringLiteral("fleet.share_tail"), QString(), m_shareTail);
    m_speculate = new QCheckBox(tr("Copies of overdue subtasks at the job's end"));
    add(fleet, QStringLiteral("fleet.speculate"), QString(), m_speculate);
    m_dismissIdle = new QCheckBox(tr("Let idle workers go at the job's end"));
    add(fleet, QStringLiteral("fleet.dismiss_idle"), QString(), m_dismissIdle,
        tr("Once the last epoch is open and nothing is left to hand out, a remote worker that asks for work is "
           "dismissed and stops costing money, instead of waiting for the job to finish"));
    m_heartbeatTimeout = dspin(0, 24 * 3600, 0, 5);
    m_heartbeatTimeout->setSuffix(tr(" s"));
    add(fleet, QStringLiteral("fleet.heartbeat_timeout_s"), tr("Worker gone after silence of"), m_heartbeatTimeout);
    m_preemptMean = dspin(0, 1e6, 1, 5);
    m_preemptMean->setSuffix(tr(" s"));
    m_preemptMean->setSpecialValueText(tr("off"));
    add(fleet, QStringLiteral("fleet.preemption.mean_interval_s"), tr("Simulated preemption every"), m_preemptMean,
        tr("For demos: knock a worker of this app out at random, on average this often"));
    m_noticeFraction = dspin(0, 1, 2, 0.1);
    add(fleet, QStringLiteral("fleet.preemption.notice_fraction"), tr("Share with a notice"), m_noticeFraction);
    m_rejoinDelay = dspin(0, 1e6, 1, 1);
    m_rejoinDelay->setSuffix(tr(" s"));
    add(fleet, QStringLiteral("fleet.preemption.rejoin_delay_s"), tr("Back after"), m_rejoinDelay);
    m_instanceType = new QComboBox;
    m_instanceType->setEditable(true);
    if (auto prices = PriceTable::builtin())
        for (const auto &p : prices->instances())
            m_instanceType->addItem(p.name);
    add(fleet, QStringLiteral("fleet.instance_type"), tr("Instance type (this app's workers)"), m_instanceType);
    m_priceClass = combo(priceClassNames());
    add(fleet, QStringLiteral("fleet.price_class"), tr("Price class"), m_priceClass);
    m_compression = combo(compressionNames());
    add(fleet, QStringLiteral("fleet.compression"), tr("Results sent as"), m_compression,
        tr("none: the new weights in float32; fp16 or int8: the change from the base weights, in half or a quarter "
           "of the bytes"));
    m_requireDevice = combo({QStringLiteral("any"), QStringLiteral("cpu"), QStringLiteral("cuda")});
    add(fleet, QStringLiteral("fleet.require_device"), tr("Workers need a device"), m_requireDevice,
        tr("In a fleet: only workers with this device train the job (fp16 precision always needs cuda)"));
    m_requireMemory = spin(0, 1 << 30);
    m_requireMemory->setSpecialValueText(tr("any"));
    m_requireMemory->setSuffix(tr(" MiB"));
    add(fleet, QStringLiteral("fleet.require_memory_mb"), tr("Workers need memory"), m_requireMemory,
        tr("In a fleet: only workers with at least this much memory train the job"));
    m_priceTable = new QLineEdit;
    m_priceTable->setPlaceholderText(tr("built-in table (approximate, June 2024)"));
    add(fleet, QStringLiteral("fleet.price_table"), tr("Price table"),
        withBrowse(m_priceTable, [] { return false; }, tr("JSON (*.json)")));
    m_fields.insert(QStringLiteral("fleet.price_table"), m_priceTable);

    m_buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    m_buttons->button(QDialogButtonBox::Ok)->setText(tr("Start"));
    auto *open = m_buttons->addButton(tr("Open job file…"), QDialogButtonBox::ActionRole);
    auto *save = m_buttons->addButton(tr("Save job file…"), QDialogButtonBox::ActionRole);
    layout->addWidget(m_buttons);
    connect(m_buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(open, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open job file"), {}, tr("Job files (*.json)"));
        if (path.isEmpty())
            return;
        if (auto r = loadJobFile(path); !r) {
            QLabel *error = m_errors.value(QStringLiteral("name"));
            error->setText(r.error());
            error->show();
        }
    });
    connect(save, &QPushButton::clicked, this, [this] {
        const QString path = dialogs::savePath(this, tr("Save job file"), m_name->text() + QStringLiteral(".json"),
                                               tr("Job files (*.json)"));
        if (!path.isEmpty())
            (void)saveJobFile(path);
    });

    // Every edit checks the whole job again.
    for (QWidget *w : std::as_const(m_fields)) {
        if (auto *e = qobject_cast<QLineEdit *>(w))
            connect(e, &QLineEdit::textChanged, this, &JobWizard::check);
        else if (auto *s = qobject_cast<QSpinBox *>(w))
            connect(s, &QSpinBox::valueChanged, this, &JobWizard::check);
        else if (auto *d = qobject_cast<QDoubleSpinBox *>(w))
            connect(d, &QDoubleSpinBox::valueChanged, this, &JobWizard::check);
        else if (auto *c = qobject_cast<QComboBox *>(w))
            connect(c, &QComboBox::currentTextChanged, this, &JobWizard::check);
        else if (auto *b = qobject_cast<QCheckBox *>(w))
            connect(b, &QCheckBox::toggled, this, &JobWizard::check);
    }
}

void JobWizard::setJob(const JobSpec &j)
{
    m_loading = true;
    m_name->setText(j.name);
    m_datasetKind->setCurrentText(j.dataset.kind);
    m_datasetPath->setText(j.dataset.path);
    m_labelColumn->setText(j.dataset.labelColumn);
    m_testFraction->setValue(j.dataset.testFraction);
    m_trainLimit->setValue(int(j.dataset.trainLimit));
    m_testLimit->setValue(int(j.dataset.testLimit));
    m_imageSize->setValue(j.dataset.imageSize);
    m_color->setCurrentText(j.dataset.color);
    m_badImages->setCurrentText(j.dataset.badImages);
    m_cropPadding->setValue(j.dataset.cropPadding);
    m_horizontalFlip->setChecked(j.dataset.horizontalFlip);
    m_modelKind->setCurrentText(j.model.kind);
    m_modelPath->setText(j.model.path);
    m_dropout->setValue(j.model.dropout);
    QStringList hidden;
    for (const int h : j.model.hidden)
        hidden << QString::number(h);
    m_hidden->setText(hidden.join(QStringLiteral(", ")));
    m_epochs->setValue(j.training.epochs);
    m_shards->setValue(j.training.shards);
    m_localEpochs->setValue(j.training.localEpochs);
    m_localSteps->setValue(j.training.localSteps);
    m_batchSize->setValue(j.training.batchSize);
    m_optimizer->setCurrentText(j.training.optimizer);
    m_learningRate->setText(QString::number(j.training.learningRate));
    m_momentum->setValue(j.training.momentum);
    m_nesterovSgd->setChecked(j.training.nesterov);
    m_weightDecay->setValue(j.training.weightDecay);
    m_beta1->setValue(j.training.beta1);
    m_beta2->setValue(j.training.beta2);
    m_eps->setText(QString::number(j.training.eps));
    m_clipGradNorm->setValue(j.training.clipGradNorm);
    m_labelSmoothing->setValue(j.training.labelSmoothing);
    m_task->setCurrentText(j.training.task);
    m_regressionLoss->setCurrentText(j.training.regressionLoss);
    m_tokenType->setCurrentText(j.dataset.tokenType);
    m_context->setValue(j.dataset.context);
    m_precision->setCurrentText(j.training.precision);
    m_schedule->setCurrentText(j.training.lrSchedule);
    m_warmup->setValue(j.training.lrWarmupSteps);
    m_floor->setValue(j.training.lrFloor);
    m_carryOptimizer->setChecked(j.training.carryOptimizer);
    m_bestMetric->setCurrentText(j.training.bestMetric);
    m_earlyStop->setValue(j.training.earlyStopAfter);
    m_seed->setValue(int(j.training.seed));
    m_threads->setValue(j.training.threads);
    m_rule->setCurrentText(j.aggregation.rule);
    m_alpha->setValue(j.aggregation.alpha);
    m_stalenessExponent->setValue(j.aggregation.stalenessExponent);
    m_outerLearningRate->setValue(j.aggregation.outerLearningRate);
    m_outerMomentum->setValue(j.aggregation.outerMomentum);
    m_nesterov->setChecked(j.aggregation.nesterov);
    m_momentumPeriod->setValue(j.aggregation.momentumPeriod);
    m_stalenessDamping->setValue(j.aggregation.stalenessDamping);
    m_buffer->setValue(j.aggregation.buffer);
    m_epochsAhead->setValue(j.fleet.epochsAhead);
    m_shareTail->setChecked(j.fleet.shareTail);
    m_speculate->setChecked(j.fleet.speculate);
    m_dismissIdle->setChecked(j.fleet.dismissIdle);
    m_leaseTimeout->setValue(j.fleet.leaseTimeoutSeconds);
    m_targetSubtask->setValue(j.fleet.targetSubtaskSeconds);
    m_heartbeatTimeout->setValue(j.fleet.heartbeatTimeoutSeconds);
    m_preemptMean->setValue(j.fleet.preemption.meanIntervalSeconds);
    m_noticeFraction->setValue(j.fleet.preemption.noticeFraction);
    m_rejoinDelay->setValue(j.fleet.preemption.rejoinDelaySeconds);
    m_instanceType->setCurrentText(j.fleet.instanceType);
    m_priceClass->setCurrentText(j.fleet.priceClass);
    m_compression->setCurrentText(j.fleet.compression);
    m_requireDevice->setCurrentText(j.fleet.requireDevice);
    m_requireMemory->setValue(int(std::min<qint64>(j.fleet.requireMemoryMb, 1 << 30)));
    m_priceTable->setText(j.fleet.priceTable);
    m_localWorkers->setValue(j.fleet.workers);
    m_loading = false;
    check();
}

JobSpec JobWizard::job() const
{
    JobSpec j = m_base;
    j.name = m_name->text().trimmed();
    j.dataset.kind = m_datasetKind->currentText();
    j.dataset.path = m_datasetPath->text().trimmed();
    j.dataset.labelColumn = m_labelColumn->text().trimmed();
    j.dataset.testFraction = m_testFraction->value();
    j.dataset.trainLimit = m_trainLimit->value();
    j.dataset.testLimit = m_testLimit->value();
    j.dataset.imageSize = m_imageSize->value();
    j.dataset.color = m_color->currentText();
    j.dataset.badImages = m_badImages->currentText();
    j.dataset.cropPadding = m_cropPadding->value();
    j.dataset.horizontalFlip = m_horizontalFlip->isChecked();
    j.model.kind = m_modelKind->currentText();
    j.model.path = m_modelPath->text().trimmed();
    j.model.dropout = m_dropout->value();
    j.model.hidden.clear();
    for (const QString &part : m_hidden->text().split(u',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int h = part.trimmed().toInt(&ok);
        j.model.hidden << (ok ? h : -1);
    }
    j.training.epochs = m_epochs->value();
    j.training.shards = m_shards->value();
    j.training.localEpochs = m_localEpochs->value();
    j.training.localSteps = m_localSteps->value();
    j.training.batchSize = m_batchSize->value();
    j.training.optimizer = m_optimizer->currentText();
    bool ok = false;
    const double lr = m_learningRate->text().trimmed().toDouble(&ok);
    j.training.learningRate = ok ? lr : -1.0;
    j.training.momentum = m_momentum->value();
    j.training.nesterov = m_nesterovSgd->isChecked();
    j.training.weightDecay = m_weightDecay->value();
    j.training.beta1 = m_beta1->value();
    j.training.beta2 = m_beta2->value();
    const double eps = m_eps->text().trimmed().toDouble(&ok);
    j.training.eps = ok ? eps : -1.0;
    j.training.clipGradNorm = m_clipGradNorm->value();
    j.training.labelSmoothing = m_labelSmoothing->value();
    j.training.task = m_task->currentText();
    j.training.regressionLoss = m_regressionLoss->currentText();
    j.dataset.tokenType = m_tokenType->currentText();
    j.dataset.context = m_context->value();
    j.training.precision = m_precision->currentText();
    j.training.lrSchedule = m_schedule->currentText();
    j.training.lrWarmupSteps = m_warmup->value();
    j.training.lrFloor = m_floor->value();
    j.training.carryOptimizer = m_carryOptimizer->isChecked();
    j.training.bestMetric = m_bestMetric->currentText();
    j.training.earlyStopAfter = m_earlyStop->value();
    j.training.seed = quint64(m_seed->value());
    j.training.threads = m_threads->value();
    j.aggregation.rule = m_rule->currentText();
    j.aggregation.alpha = m_alpha->value();
    j.aggregation.stalenessExponent = m_stalenessExponent->value();
    j.aggregation.outerLearningRate = m_outerLearningRate->value();
    j.aggregation.outerMomentum = m_outerMomentum->value();
    j.aggregation.nesterov = m_nesterov->isChecked();
    j.aggregation.momentumPeriod = m_momentumPeriod->value();
    j.aggregation.stalenessDamping = m_stalenessDamping->value();
    j.aggregation.buffer = m_buffer->value();
    j.fleet.epochsAhead = m_epochsAhead->value();
    j.fleet.shareTail = m_shareTail->isChecked();
    j.fleet.speculate = m_speculate->isChecked();
    j.fleet.dismissIdle = m_dismissIdle->isChecked();
    j.fleet.workers = m_localWorkers->value();
    j.fleet.leaseTimeoutSeconds = m_leaseTimeout->value();
    j.fleet.targetSubtaskSeconds = m_targetSubtask->value();
    j.fleet.heartbeatTimeoutSeconds = m_heartbeatTimeout->value();
    j.fleet.preemption.meanIntervalSeconds = m_preemptMean->value();
    j.fleet.preemption.noticeFraction = m_noticeFraction->value();
    j.fleet.preemption.rejoinDelaySeconds = m_rejoinDelay->value();
    j.fleet.instanceType = m_instanceType->currentText().trimmed();
    j.fleet.priceClass = m_priceClass->currentText();
    j.fleet.compression = m_compression->currentText();
    j.fleet.requireDevice = m_requireDevice->currentText();
    j.fleet.requireMemoryMb = m_requireMemory->value();
    j.fleet.priceTable = m_priceTable->text().trimmed();
    return j;
}

int JobWizard::localWorkers() const
{
    return m_localWorkers->value();
}

void JobWizard::check()
{
    if (m_loading)
        return;
    const JobSpec j = job();
    m_problems.clear();
    for (const QString &problem : j.problems())
        m_problems.insert(JobSpec::fieldOf(problem), problem);
    // What the job file's checks cannot know: whether the files are there.
    auto missing = [this](const QString &f, const QString &path, bool folder, const QString &what) {
        const QFileInfo info(path);
        if (!path.isEmpty() && (!info.exists() || info.isDir() != folder))
            m_problems.insert(f, tr("'%1': %2 '%3' does not exist").arg(f, what, path));
    };
    const bool folderKind = j.dataset.kind == QLatin1String("idx") || j.dataset.kind == QLatin1String("images");
    const bool eitherKind = j.dataset.kind == QLatin1String("npy") || j.dataset.kind == QLatin1String("tokens");
    if (eitherKind && !j.dataset.path.isEmpty() && !QFileInfo::exists(j.dataset.path))
        m_problems.insert(QStringLiteral("dataset.path"),
                          tr("'dataset.path': '%1' does not exist").arg(j.dataset.path));
    else if (j.dataset.kind != QLatin1String("fashion-mnist") && !eitherKind)
        missing(QStringLiteral("dataset.path"), j.dataset.path, folderKind, folderKind ? tr("the folder") : tr("the file"));
    else if (!j.dataset.path.isEmpty())
        missing(QStringLiteral("dataset.path"), j.dataset.path, true, tr("the folder"));
    if (j.model.kind == QLatin1String("torchscript"))
        missing(QStringLiteral("model.path"), j.model.path, false, tr("the file"));
    missing(QStringLiteral("fleet.price_table"), j.fleet.priceTable, false, tr("the file"));
    if (j.fleet.priceTable.isEmpty()) {
        auto prices = PriceTable::builtin();
        if (prices && !prices->find(j.fleet.instanceType))
            m_problems.insert(QStringLiteral("fleet.instance_type"),
                              tr("'fleet.instance_type': '%1' is not in the price table").arg(j.fleet.instanceType));
    }
    if (m_learningRate->text().trimmed().toDouble() <= 0)
        m_problems.insert(QStringLiteral("training.learning_rate"),
                          tr("'training.learning_rate' must be a positive number, like 0.03"));
    // Settings that mean nothing for this kind of data are greyed out, unless they need fixing.
    const bool images = j.dataset.kind == QLatin1String("images");
    const bool table = j.dataset.kind == QLatin1String("csv");
    for (const char *f : {"dataset.image_size", "dataset.color", "dataset.bad_images"})
        m_fields.value(QString::fromLatin1(f))->setEnabled(images || m_problems.contains(QString::fromLatin1(f)));
    const bool tokens = j.dataset.kind == QLatin1String("tokens");
    for (const char *f : {"dataset.crop_padding", "dataset.horizontal_flip"})
        m_fields.value(QString::fromLatin1(f))->setEnabled((!table && !tokens) || m_problems.contains(QString::fromLatin1(f)));
    for (const char *f : {"dataset.token_type", "dataset.context"})
        m_fields.value(QString::fromLatin1(f))->setEnabled(tokens || m_problems.contains(QString::fromLatin1(f)));
    m_fields.value(QStringLiteral("training.regression_loss"))
        ->setEnabled(j.training.task == QLatin1String("regression")
                     || m_problems.contains(QStringLiteral("training.regression_loss")));

    for (auto it = m_errors.begin(); it != m_errors.end(); ++it) {
        const QString text = m_problems.value(it.key());
        // The message repeats the field's name for job files; next to the field it is clear.
        it.value()->setText(QString(text).remove(QRegularExpression(QStringLiteral("^'[^']*':? ?"))));
        it.value()->setVisible(!text.isEmpty());
    }
    for (int t = 0; t < m_tabs->count(); ++t) {
        bool bad = false;
        for (auto it = m_errors.begin(); it != m_errors.end(); ++it)
            bad = bad || (m_tabs->widget(t)->isAncestorOf(it.value()) && !m_problems.value(it.key()).isEmpty());
        m_tabs->setTabText(t, m_tabs->tabText(t).remove(QStringLiteral(" ⚠")) + (bad ? QStringLiteral(" ⚠") : QString()));
    }
    m_buttons->button(QDialogButtonBox::Ok)->setEnabled(m_problems.isEmpty());
}

QString JobWizard::problemText(const QString &f) const
{
    const QLabel *label = m_errors.value(f);
    return label && m_problems.contains(f) ? label->text() : QString();
}

Result<void> JobWizard::loadJobFile(const QString &path)
{
    auto loaded = JobSpec::load(path);
    if (!loaded)
        return loaded.takeError();
    m_base = *loaded;
    setJob(*loaded);
    return {};
}

Result<void> JobWizard::saveJobFile(const QString &path) const
{
    return job().save(path);
}

} // namespace flotilla::ui
