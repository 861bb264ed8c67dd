<?php
// Dispatches App\Jobs\ResizeImage from PHP with Laravel's real queue code (Debian's Laravel 8.83),
// into the `jobs` table of the SQLite file given as the first argument. In a Laravel app this is
// just `ResizeImage::dispatch('/img/dog.png', 1280);` with QUEUE_CONNECTION=database.
namespace App\Jobs {
    error_reporting(E_ALL & ~E_DEPRECATED);
    require '/usr/share/php/Illuminate/autoload.php';
    require_once '/usr/share/php/Carbon/autoload.php';

    class ResizeImage implements \Illuminate\Contracts\Queue\ShouldQueue
    {
        use \Illuminate\Bus\Queueable, \Illuminate\Queue\InteractsWithQueue;

        public function __construct(public string $path, public int $width) {}

        public function handle() {}
    }
}

namespace {
use Illuminate\Container\Container;
use Illuminate\Database\Capsule\Manager as DB;
use Illuminate\Queue\Capsule\Manager as Queue;

$container = new Container;
Container::setInstance($container);
$db = new DB($container);
$db->addConnection(['driver' => 'sqlite', 'database' => $argv[1]]);
$db->setAsGlobal();
$container['db'] = $db->getDatabaseManager();
$queue = new Queue($container);
$queue->addConnection(['driver' => 'database', 'table' => 'jobs', 'queue' => 'default',
    'retry_after' => 90]);
$queue->setAsGlobal();

$id = Queue::connection()->push(new App\Jobs\ResizeImage('/img/dog.png', 1280));
echo "PHP (Laravel 8.83) dispatched App\\Jobs\\ResizeImage as job $id\n";
}
