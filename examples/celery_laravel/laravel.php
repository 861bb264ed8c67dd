<?php
// The Laravel side of the example, with Laravel's real queue code (Debian's Laravel 8.83) and
// no full app: `php laravel.php dispatch DB` is `ResizeImage::dispatch('/img/cat.png', 640)`
// with QUEUE_CONNECTION=database; `php laravel.php work DB` is
// `php artisan queue:work --stop-when-empty` (Illuminate\Queue\Worker).
namespace App\Jobs {
    error_reporting(E_ALL & ~E_DEPRECATED);
    require '/usr/share/php/Illuminate/autoload.php';
    require_once '/usr/share/php/Carbon/autoload.php';

    use Illuminate\Bus\Queueable;
    use Illuminate\Contracts\Queue\ShouldQueue;
    use Illuminate\Foundation\Bus\Dispatchable;
    use Illuminate\Queue\InteractsWithQueue;

    /** Run by a Celery task (tasks.py): Laravel only dispatches it. */
    class ResizeImage implements ShouldQueue
    {
        use Dispatchable, InteractsWithQueue, Queueable;

        public function __construct(public string $path, public int $width) {}

        public function handle() { throw new \LogicException('Celery runs this job'); }
    }

    /** Dispatched by the Celery task with send_task(); run here, by Laravel's worker. */
    class NotifyUser implements ShouldQueue
    {
        use Dispatchable, InteractsWithQueue, Queueable;

        public $userId;
        public $message;
        public $resizedAt;

        public function handle()
        {
            echo "PHP (Laravel's worker) ran NotifyUser: user {$this->userId}: {$this->message}"
                . " (resized at {$this->resizedAt->toIso8601String()})\n";
        }
    }
}

namespace {
use Illuminate\Bus\Dispatcher as Bus;
use Illuminate\Container\Container;
use Illuminate\Contracts\Debug\ExceptionHandler;
use Illuminate\Database\Capsule\Manager as DB;
use Illuminate\Events\Dispatcher as Events;
use Illuminate\Queue\Capsule\Manager as Queue;
use Illuminate\Queue\Worker;
use Illuminate\Queue\WorkerOptions;

[$_, $command, $file] = $argv + [null, null, null];
$container = new Container;
Container::setInstance($container);
$container->instance(Illuminate\Contracts\Container\Container::class, $container);
$events = new Events($container);
$container->instance('events', $events);
$container->instance(Illuminate\Contracts\Events\Dispatcher::class, $events);
$db = new DB($container);
$db->addConnection(['driver' => 'sqlite', 'database' => $file]);
$db->setAsGlobal();
$container['db'] = $db->getDatabaseManager();
$queue = new Queue($container);
$queue->addConnection(['driver' => 'database', 'table' => 'jobs', 'queue' => 'default',
    'retry_after' => 90], 'database');
$queue->getQueueManager()->setDefaultDriver('database');
$container->instance('queue', $queue->getQueueManager());
$container->instance(Illuminate\Contracts\Queue\Factory::class, $queue->getQueueManager());
$bus = new Bus($container, fn ($connection = null) => $queue->getQueueManager()->connection($connection));
$container->instance(Illuminate\Contracts\Bus\Dispatcher::class, $bus);

if ($command === 'dispatch') {
    $id = $queue->getQueueManager()->connection()->push(new App\Jobs\ResizeImage('/img/cat.png', 640));
    echo "PHP (Laravel 8.83) dispatched App\\Jobs\\ResizeImage as job $id\n";
    exit(0);
}
$handler = new class implements ExceptionHandler {
    public function report(Throwable $e) { fwrite(STDERR, get_class($e) . ': ' . $e->getMessage() . "\n"); }
    public function shouldReport(Throwable $e) { return true; }
    public function render($request, Throwable $e) { throw $e; }
    public function renderForConsole($output, Throwable $e) { $this->report($e); }
};
$worker = new Worker($queue->getQueueManager(), $events, $handler, fn () => false);
$options = new WorkerOptions('default', 0, 128, 60, 0, 1, false, true);  // sleep 0, tries 1, stop when empty
$worker->daemon('database', 'default', $options);
}
